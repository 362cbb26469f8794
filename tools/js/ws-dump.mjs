// Subscribes to one stream over aurald's /ws and prints a JSON line per
// chunk (seq, sha256 of its embeddings and logits as float32 bytes, text)
// until the stream ends; tests/integration/test_web.py compares them with
// a Unix-socket subscriber's. Prints "ready" once subscribed.
//   node ws-dump.mjs ws://HOST:PORT/ws STREAM
import { createHash } from "node:crypto";

import { AuralClient } from "./aural-client.js";
import { NodeWebSocket } from "./node-websocket.mjs";

const [url, stream] = process.argv.slice(2);
const sha = (a) => (a ? createHash("sha256").update(Buffer.from(a.buffer)).digest("hex") : null);
const c = await AuralClient.connect(url, {
  WebSocket: globalThis.WebSocket ?? NodeWebSocket,
});
c.on("chunk", (ch) => {
  if (ch.name !== stream) return;
  console.log(JSON.stringify({ seq: ch.seq, emb: sha(ch.embeddings),
                               logits: sha(ch.logits), text: ch.text }));
});
c.on("ended", (e) => {
  if (e.name !== stream) return;
  console.log(JSON.stringify({ ended: e.reason }));
  c.close();
  process.exit(0);
});
await c.subscribe({ stream, outputs: ["embeddings", "logits", "text"] });
console.log("ready");
