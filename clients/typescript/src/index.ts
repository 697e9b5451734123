// @zarrgate/client: see README.md.
export * from "./client.js";
export { resolveSelection, sliceShape, type Selection, type SelectionItem, type Slice } from "./selection.js";
export * as gateway from "./gen/zarrgate/gateway/v1/gateway_pb.js";
export * as store from "./gen/zarrgate/store/v1/store_pb.js";
