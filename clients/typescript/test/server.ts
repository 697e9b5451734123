// Real zarrgate servers for the tests: the binary the test script built
// ($ZARRGATE_BIN), started on 127.0.0.1 port 0 (or a unix socket) over a
// temporary directory, and the Go writer ($ZARRGATE_GOWRITER) that fills it.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

export function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`$${name} is not set: run the tests with scripts/test-typescript.sh`);
  return v;
}

export interface Server {
  addr: string;
  proc: ChildProcess;
  log: () => string;
  stop: () => Promise<void>;
}

/** Starts `zarrgate serve --root root` with extra flags; listen defaults to 127.0.0.1:0. */
export async function startServer(root: string, extra: string[] = [], listen = "127.0.0.1:0"): Promise<Server> {
  const proc = spawn(env("ZARRGATE_BIN"), ["serve", "--root", root, "--listen", listen, ...extra], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  proc.stderr!.setEncoding("utf8").on("data", (s: string) => (log += s));
  const exited = new Promise<void>((resolve) => proc.on("exit", () => resolve()));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
    await exited;
  };
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (listen.startsWith("unix://")) {
      if (existsSync(listen.slice("unix://".length)) && /addr=/.test(log)) return { addr: listen, proc, log: () => log, stop };
    } else {
      const m = /addr=(127\.0\.0\.1:\d+)/.exec(log);
      if (m) return { addr: m[1], proc, log: () => log, stop };
    }
    if (proc.exitCode !== null) break;
    await sleep(50);
  }
  await stop();
  throw new Error(`zarrgate serve did not start:\n${log}`);
}

export interface Entry {
  path: string;
  dtype: string;
  shape: number[];
  chunks: number[];
  shards?: number[];
  codecs?: string;
  fill?: string;
  format?: string;
  attributes?: string;
  written: boolean;
}

/** Runs the Go writer against addr; returns its manifest. */
export function writeArrays(addr: string, certs: string): Entry[] {
  const out = execFileSync(env("ZARRGATE_GOWRITER"), ["-addr", addr, "-certs", certs], { encoding: "utf8" });
  return JSON.parse(out) as Entry[];
}

/** A bearer token for user, appended to the tokens file, as an operator makes one. */
export function newToken(tokensFile: string, user: string): string {
  return execFileSync(env("ZARRGATE_BIN"), ["token", "new", "--user", user, "--append", tokensFile], {
    encoding: "utf8",
  }).trim();
}
