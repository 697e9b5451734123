// zarrgate browser view: the hierarchy as a tree, a node's metadata, and
// for arrays a 2-D slice drawn by the slab endpoint (format=png), with a
// slider for every other dimension. No libraries: the page must work from
// the binary alone.
"use strict";

const MAX_SIDE = 1024; // the most pixels drawn along a side; larger extents are strided
const DISPLAY = 512;   // the size small images are zoomed up to

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
const selftest = new URLSearchParams(location.search).has("selftest");

// A server that authenticates by token answers the data requests 401: the
// page then asks for a token (kept in this tab's sessionStorage only) and
// sends it as "Authorization: Bearer" with every data request. The page's
// own files need none.
const TOKEN_KEY = "zarrgate-token";
const token = () => sessionStorage.getItem(TOKEN_KEY) || "";
const authHeaders = () => (token() ? { Authorization: "Bearer " + token() } : {});

function askToken(why) {
  const form = el("form", { id: "login" },
    el("label", { for: "token", text: why + " Token: " }),
    el("input", { id: "token", type: "password", autocomplete: "off", size: "40" }),
    el("button", { type: "submit", text: "use" }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    location.reload();
  });
  $("#tree").replaceChildren(form);
}

async function getJSON(url) {
  const r = await fetch(url, { headers: authHeaders() });
  if (r.status === 401) {
    askToken(token() ? "The token was refused." : "This server needs a token.");
    const e = new Error("a token is needed");
    e.asked = true;
    throw e;
  }
  if (!r.ok) throw new Error(`${url}: ${r.status} ${(await r.text()).trim()}`);
  return r.json();
}

function status(msg) { $("#status").textContent = msg || ""; }

// buildTree turns the flat list of nodes (depth first, lexical) into nested lists.
function buildTree(nodes) {
  const root = el("ul");
  const lists = new Map([["", root]]);
  const parentList = (path) => {
    const i = path.lastIndexOf("/");
    const parent = i < 0 ? "" : path.slice(0, i);
    if (!lists.has(parent)) {
      // an intermediate prefix with no metadata: show it as a plain folder
      const ul = el("ul");
      const li = el("li", {}, el("span", { class: "muted", text: "· " + parent.slice(parent.lastIndexOf("/") + 1) }), ul);
      parentList(parent).append(li);
      lists.set(parent, ul);
    }
    return lists.get(parent);
  };
  for (const n of nodes) {
    const name = n.path.slice(n.path.lastIndexOf("/") + 1);
    const a = el("a", { href: "#" + n.path, "data-path": n.path, "data-kind": n.kind },
      el("span", { class: "kind", text: n.kind === "array" ? "▦" : "▸" }), name);
    const li = el("li", {}, a);
    if (n.kind === "group") {
      const ul = el("ul");
      li.append(ul);
      lists.set(n.path, ul);
    }
    parentList(n.path).append(li);
  }
  return root;
}

function fmt(v) { return v === undefined || v === null ? "—" : Array.isArray(v) ? "(" + v.join(", ") + ")" : String(v); }

function metaTable(m) {
  const rows = [["kind", m.kind], ["format", m.format]];
  if (m.kind === "array") {
    rows.push(["shape", fmt(m.shape)], ["data type", m.data_type], ["chunks", fmt(m.chunk_shape)],
      ["shards", m.shard_shape ? fmt(m.shard_shape) : "—"],
      ["dimension names", m.dimension_names ? fmt(m.dimension_names.map((d) => d ?? "·")) : "—"],
      ["fill value", JSON.stringify(m.fill_value)]);
  }
  const t = el("table", { class: "meta" });
  for (const [k, v] of rows) t.append(el("tr", {}, el("th", { text: k }), el("td", { text: v })));
  if (m.kind === "array") {
    t.append(el("tr", {}, el("th", { text: "codecs" }), el("td", {}, el("pre", { text: JSON.stringify(m.codecs) }))));
  }
  t.append(el("tr", {}, el("th", { text: "attributes" }),
    el("td", {}, el("pre", { id: "attrs", text: m.attributes && Object.keys(m.attributes).length ? JSON.stringify(m.attributes, null, 2) : "{}" }))));
  return t;
}

// sliceView is the image of the last two dimensions, with sliders for the others.
function sliceView(path, m) {
  const box = el("div");
  const shape = m.shape;
  const nd = shape.length;
  if (nd === 0 || shape.some((n) => n === 0)) { box.append(el("p", { class: "muted", text: "no image: the array is empty or 0-d" })); return box; }
  const names = (m.dimension_names || []).map((d, i) => d || `dim ${i}`);
  const name = (d) => names[d] || `dim ${d}`;
  const index = shape.map(() => 0);
  const controls = el("div", { class: "controls" });
  const yd = nd - 2, xd = nd - 1;
  for (let d = 0; d < nd - 2; d++) {
    const out = el("output", { text: "0" });
    const input = el("input", { type: "range", min: "0", max: String(shape[d] - 1), value: "0", "data-dim": String(d) });
    input.addEventListener("input", () => { index[d] = +input.value; out.textContent = input.value; draw(); });
    controls.append(el("label", {}, name(d), input, out));
  }
  const cmap = el("select", { id: "cmap" }, el("option", { value: "viridis", text: "viridis" }), el("option", { value: "gray", text: "gray" }));
  cmap.addEventListener("change", draw);
  controls.append(el("label", {}, "colormap", cmap));
  const range = el("span", { class: "muted" });
  controls.append(range);
  const img = el("img", { id: "slice", alt: "slice of " + path });
  const view = el("div", { id: "view" }, img);
  box.append(controls, view);
  const h = yd >= 0 ? shape[yd] : 1, w = shape[xd];
  const sy = Math.ceil(h / MAX_SIDE), sx = Math.ceil(w / MAX_SIDE);
  const ih = Math.ceil(h / sy), iw = Math.ceil(w / sx);
  const zoom = Math.max(1, Math.min(16, Math.floor(DISPLAY / Math.max(ih, iw))));
  img.width = iw * zoom; img.height = ih * zoom;
  img.addEventListener("load", () => { status(""); });
  img.addEventListener("error", () => { status("the slice could not be drawn"); });
  function draw() {
    const sel = shape.map((n, d) => d === xd ? `::${sx}` : d === yd ? `::${sy}` : String(index[d]));
    const q = new URLSearchParams({ sel: sel.join(","), format: "png", cmap: cmap.value });
    const url = "api/slab/" + path.split("/").map(encodeURIComponent).join("/") + "?" + q;
    range.textContent = (sx > 1 || sy > 1) ? `every ${sy} × ${sx} element` : "";
    if (!token()) { img.src = url; return; }
    // With a token the image is fetched (an <img> cannot send a header).
    fetch(url, { headers: authHeaders() }).then(async (r) => {
      if (!r.ok) throw new Error(`${r.status} ${(await r.text()).trim()}`);
      const old = img.src;
      img.src = URL.createObjectURL(await r.blob());
      if (old.startsWith("blob:")) URL.revokeObjectURL(old);
    }).catch((e) => status("the slice could not be drawn: " + (e.message || e)));
  }
  if (m.data_type && /^(bool|u?int\d+|float\d+|complex\d+)$/.test(m.data_type)) draw();
  else box.replaceChildren(el("p", { class: "muted", text: `no image for ${m.data_type} elements` }));
  return box;
}

async function show(path) {
  for (const a of document.querySelectorAll("#tree a")) a.classList.toggle("selected", a.dataset.path === path);
  const sec = $("#node");
  if (!path) { sec.replaceChildren(el("p", { class: "muted", text: "Select a group or an array on the left." })); return null; }
  try {
    const m = await getJSON("api/node?path=" + encodeURIComponent(path));
    sec.replaceChildren(el("h2", { text: "/" + path }));
    if (m.kind === "array") sec.append(sliceView(path, m));
    sec.append(metaTable(m));
    return m;
  } catch (e) {
    sec.replaceChildren(el("p", { class: "error", text: String(e.message || e) }));
    return null;
  }
}

async function runSelftest(m) {
  // Results for headless tests (chromium --dump-dom): written into the page.
  const res = { tree: [...document.querySelectorAll("#tree a")].map((a) => a.dataset.path) };
  const img = $("#slice");
  if (img) {
    if (!img.complete || !img.naturalWidth) await new Promise((ok) => { img.onload = ok; img.onerror = ok; });
    try { await img.decode(); } catch (e) { res.decodeError = String(e); }
    res.natural = [img.naturalWidth, img.naturalHeight];
    const r = img.getBoundingClientRect();
    res.rect = [r.left, r.top, r.width, r.height];
    const c = el("canvas", { width: String(img.naturalWidth), height: String(img.naturalHeight) });
    const ctx = c.getContext("2d");
    ctx.drawImage(img, 0, 0);
    res.pixel00 = [...ctx.getImageData(0, 0, 1, 1).data];
  }
  res.kind = m && m.kind;
  res.attributes = $("#attrs") ? $("#attrs").textContent : null;
  document.body.append(el("pre", { id: "selftest", text: JSON.stringify(res) }));
}

async function main() {
  try {
    const t = await getJSON("api/tree");
    const tree = $("#tree");
    tree.replaceChildren(buildTree(t.nodes));
    if (t.truncated) tree.append(el("p", { class: "muted", text: `first ${t.nodes.length} nodes shown` }));
    if (!t.nodes.length) tree.replaceChildren(el("p", { class: "muted", text: "no groups or arrays" }));
  } catch (e) {
    if (!e.asked) $("#tree").replaceChildren(el("p", { class: "error", text: String(e.message || e) }));
  }
  const path = () => decodeURIComponent(location.hash.slice(1));
  window.addEventListener("hashchange", () => show(path()));
  const m = await show(path());
  if (selftest) await runSelftest(m);
}
main();
