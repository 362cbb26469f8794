// Tests of tools/js/aural-client.js under Node (`node --test`): the codec
// against hand-made bytes, the client's request/reply/event logic against
// a fake WebSocket, and, when AURALD_BIN is set (meson sets it), a live
// aurald --http (through Node's WebSocket, or node-websocket.mjs where
// Node has none).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { NodeWebSocket } from "../node-websocket.mjs";

import {
  AuralClient, MSG, ProtocolError, ServerError, TimeoutError, decodeChunk,
  decodeMessage, encodeMessage, f16ToF32, softmaxRows,
} from "../aural-client.js";

const json = (o) => new TextEncoder().encode(JSON.stringify(o));

test("a message's header and payload round trip", () => {
  const m = encodeMessage(MSG.SUBSCRIBE, { all: true }, 7);
  assert.deepEqual([...m.subarray(0, 4)], [0x41, 0x55, 0x52, 0x4c]);
  const d = decodeMessage(m);
  assert.equal(d.type, MSG.SUBSCRIBE);
  assert.equal(d.streamId, 7);
  assert.deepEqual(JSON.parse(new TextDecoder().decode(d.payload)), { all: true });
  assert.equal(encodeMessage(MSG.PING).length, 16);
});

test("a WebSocket message that is not exactly one protocol message is refused", () => {
  const m = encodeMessage(MSG.PONG, new Uint8Array([1, 2, 3]));
  assert.throws(() => decodeMessage(m.subarray(0, 10)), ProtocolError);
  assert.throws(() => decodeMessage(m.subarray(0, 18)), /header says 19/);
  const bad = m.slice();
  bad[0] = 0;
  assert.throws(() => decodeMessage(bad), /bad magic/);
  const v2 = m.slice();
  v2[4] = 2;
  assert.throws(() => decodeMessage(v2), /version 2/);
});

test("f16 values convert exactly", () => {
  assert.equal(f16ToF32(0x3c00), 1);
  assert.equal(f16ToF32(0xc000), -2);
  assert.equal(f16ToF32(0x7bff), 65504);
  assert.equal(f16ToF32(0x0001), 2 ** -24);
  assert.equal(f16ToF32(0x7c00), Infinity);
  assert.ok(Number.isNaN(f16ToF32(0x7e00)));
});

// A CHUNK payload: 2 frames, d_model 3, vocab 2, the given outputs.
function chunkPayload({ outputs = 7, dtype = 0, text = "a b" } = {}) {
  const size = dtype ? 2 : 4;
  const t = new TextEncoder().encode(text);
  const n = 72 + (outputs & 1 ? 6 * size : 0) + (outputs & 2 ? 4 * size : 0) +
            (outputs & 4 ? t.length : 0);
  const p = new Uint8Array(n);
  const v = new DataView(p.buffer);
  v.setBigUint64(0, 5n, true);
  v.setBigUint64(8, 10n, true);
  v.setUint32(16, 2, true);
  v.setUint32(20, 1, true);
  v.setBigInt64(40, 1234n, true);
  v.setUint32(56, 3, true);
  v.setUint32(60, 2, true);
  v.setUint16(64, outputs, true);
  v.setUint8(66, dtype);
  v.setUint32(68, outputs & 4 ? t.length : 0, true);
  let at = 72;
  const put = (x) => {
    if (dtype) v.setUint16(at, x, true);
    else v.setFloat32(at, x, true);
    at += size;
  };
  if (outputs & 1) for (let i = 0; i < 6; i++) put(dtype ? 0x3c00 : i / 2);
  if (outputs & 2) for (let i = 0; i < 4; i++) put(dtype ? 0xc000 : -i);
  if (outputs & 4) p.set(t, at);
  return p;
}

test("a CHUNK's sections decode", () => {
  const c = decodeChunk(chunkPayload());
  assert.equal(c.seq, 5);
  assert.equal(c.firstFrame, 10);
  assert.equal(c.nFrames, 2);
  assert.equal(c.final, true);
  assert.equal(c.readyUs, 1234);
  assert.deepEqual([...c.embeddings], [0, 0.5, 1, 1.5, 2, 2.5]);
  assert.deepEqual([...c.logits], [-0, -1, -2, -3]);
  assert.equal(c.text, "a b");
  const h = decodeChunk(chunkPayload({ outputs: 3, dtype: 1 }));
  assert.deepEqual([...h.embeddings], [1, 1, 1, 1, 1, 1]);
  assert.deepEqual([...h.logits], [-2, -2, -2, -2]);
  assert.equal(h.text, null);
  assert.throws(() => decodeChunk(chunkPayload().subarray(0, 80)), /its fields say/);
});

test("a CHUNK with fields §5 does not define is refused", () => {
  const bad = (at, set) => {
    const p = chunkPayload({ outputs: 3, dtype: 1 });
    set(new DataView(p.buffer), at);
    return p;
  };
  // dtype 2 has the length of f16 sections: it must not be read as f16.
  assert.throws(() => decodeChunk(bad(66, (v, o) => v.setUint8(o, 2))), /dtype 2/);
  assert.throws(() => decodeChunk(bad(64, (v, o) => v.setUint16(o, 3 | 8, true))),
                /outputs/);
  const notext = chunkPayload({ outputs: 3, dtype: 1 });
  new DataView(notext.buffer).setUint32(68, 5, true);
  assert.throws(() => decodeChunk(notext), /text_bytes/);
  const empty = new Uint8Array(72);
  new DataView(empty.buffer).setUint32(20, 1, true); // FINAL, 0 frames
  assert.equal(decodeChunk(empty).nFrames, 0);
  new DataView(empty.buffer).setUint32(20, 0, true);
  assert.throws(() => decodeChunk(empty), /0 frames/);
});

test("softmax rows sum to one", () => {
  const p = softmaxRows(new Float32Array([0, 0, 1000, 0]), 2);
  assert.deepEqual([...p], [0.5, 0.5, 1, 0]);
});

// A WebSocket whose server is the test: sent holds decoded messages.
class FakeWs {
  constructor() {
    this.sent = [];
  }
  send(bytes) {
    this.sent.push(decodeMessage(bytes));
  }
  close() {
    this.onclose?.({ code: 1000 });
  }
  reply(type, obj, streamId = 0) {
    const body = obj instanceof Uint8Array ? obj : json(obj);
    this.onmessage({ data: encodeMessage(type, body, streamId).buffer });
  }
}

const WELCOME = { version: 1, max_request_bytes: 64, max_message_bytes: 1 << 20,
                  model: { vocab_size: 0, vocab: [] } };

async function client(options) {
  const ws = new FakeWs();
  const c = new AuralClient(ws, options);
  const h = c.hello("test");
  ws.reply(MSG.WELCOME, WELCOME);
  await h;
  return [c, ws];
}

test("HELLO's client name is cut to 64 bytes of UTF-8, between characters", async () => {
  for (const [name, want] of [["\u00e9".repeat(40), "\u00e9".repeat(32)],
                              ["a" + "\u20ac".repeat(30), "a" + "\u20ac".repeat(21)],
                              ["x".repeat(100), "x".repeat(64)], ["tool 1", "tool 1"]]) {
    const ws = new FakeWs();
    const c = new AuralClient(ws);
    const h = c.hello(name);
    ws.reply(MSG.WELCOME, WELCOME);
    await h;
    const sent = JSON.parse(new TextDecoder().decode(ws.sent[0].payload));
    assert.equal(sent.client, want);
  }
});

test("a WELCOME without what the client relies on fails the connection", async () => {
  for (const change of [{ version: 2 }, { max_request_bytes: undefined },
                        { max_request_bytes: "64" }, { max_message_bytes: 0 },
                        { model: [1] }, { model: { vocab_size: 2, vocab: ["a"] } }]) {
    const ws = new FakeWs();
    const c = new AuralClient(ws);
    const h = c.hello("test");
    ws.reply(MSG.WELCOME, { ...WELCOME, ...change });
    await assert.rejects(h, ProtocolError, JSON.stringify(change));
    assert.equal(c.closed, true);
  }
});

test("requests take replies in order; a non-fatal ERROR rejects the oldest", async () => {
  const [c, ws] = await client();
  const a = c.subscribe({ all: true });
  const b = c.subscribe({ stream: "x" });
  ws.reply(MSG.ERROR, { code: 6, name: "STATE", message: "overlap", fatal: false });
  ws.reply(MSG.SUBSCRIBED, { subscription: 2 });
  await assert.rejects(a, (e) => e instanceof ServerError && e.codeName === "STATE");
  assert.equal((await b).subscription, 2);
  assert.deepEqual(JSON.parse(new TextDecoder().decode(ws.sent[2].payload)),
                   { outputs: ["embeddings"], dtype: "f32", stream: "x" });
});

test("events: a chunk carries its stream's name; an AUDIO_DATA error is not a reply", async () => {
  const [c, ws] = await client();
  const seen = [];
  c.on("chunk", (ch) => seen.push(["chunk", ch.name, ch.seq]));
  c.on("error", (e) => seen.push(["error", e.codeName]));
  const open = c.openAudio({ name: "me", sampleRate: 48000 });
  ws.reply(MSG.AUDIO_OPENED, { stream: 9, name: "me" }, 9);
  assert.deepEqual(await open, { stream: 9, name: "me" });
  const pending = c.listStreams();
  ws.reply(MSG.ERROR, { code: 11, name: "AUDIO", message: "NaN", fatal: false }, 9);
  ws.reply(MSG.STREAMS, { streams: [{ name: "me" }] });
  assert.equal((await pending).length, 1);
  ws.reply(MSG.STREAM_STARTED, { name: "me" }, 9);
  ws.reply(MSG.CHUNK, chunkPayload(), 9);
  assert.deepEqual(seen, [["error", "AUDIO"], ["chunk", "me", 5]]);
  // Audio in messages within max_request_bytes (64: 16 samples each).
  c.sendAudio(9, new Float32Array(40));
  const data = ws.sent.filter((m) => m.type === MSG.AUDIO_DATA);
  assert.deepEqual(data.map((m) => m.payload.length), [64, 64, 32]);
  assert.throws(() => c.sendAudio(9, new Int16Array(4)), TypeError);
  const closed = c.closeAudio(9);
  ws.reply(MSG.AUDIO_CLOSED, { frames: 40, chunks: 1 }, 9);
  assert.deepEqual(await closed, { frames: 40, chunks: 1 });
});

test("a stream's name is forgotten at its end, so a client open for weeks keeps the live ones alone", async () => {
  const [c, ws] = await client();
  for (let id = 1; id <= 1000; id++) {
    ws.reply(MSG.STREAM_STARTED, { name: `s${id}` }, id);
    ws.reply(MSG.STREAM_ENDED, { name: `s${id}`, reason: "closed" }, id);
  }
  ws.reply(MSG.STREAM_STARTED, { name: "live" }, 1001);
  const open = c.openAudio({ name: "mine", sampleRate: 16000 });
  ws.reply(MSG.AUDIO_OPENED, { stream: 1002, name: "mine" }, 1002);
  await open;
  assert.deepEqual([...c.names.values()], ["live", "mine"]);
  const closed = c.closeAudio(1002);
  ws.reply(MSG.AUDIO_CLOSED, { frames: 0, chunks: 0 }, 1002);
  await closed;
  assert.deepEqual([...c.names.values()], ["live"]);
});

test("a fatal ERROR rejects every request waiting", async () => {
  const [c, ws] = await client();
  const a = c.stats();
  const b = c.listStreams();
  ws.reply(MSG.ERROR, { code: 13, name: "SHUTDOWN", message: "bye", fatal: true });
  await assert.rejects(a, /SHUTDOWN/);
  await assert.rejects(b, /SHUTDOWN/);
});

test("a malformed server message fails the connection and every request waiting", async () => {
  const bad = [
    [MSG.CHUNK, chunkPayload().subarray(0, 80)],          // sizes disagree
    [MSG.STREAMS, new TextEncoder().encode("{\"streams\":")], // not JSON
    [MSG.ERROR, json(null)],                               // not an object
    [MSG.UNSUBSCRIBED, json({ subscription: 1 })],         // not the reply due
  ];
  for (const [type, body] of bad) {
    const [c, ws] = await client();
    const errors = [];
    let closed = 0;
    c.on("error", (e) => errors.push(e));
    c.on("close", () => closed++);
    const a = c.listStreams();
    const b = c.stats();
    assert.doesNotThrow(() => ws.reply(type, body));
    await assert.rejects(a, ProtocolError);
    await assert.rejects(b, ProtocolError);
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof ProtocolError);
    assert.equal(closed, 1);
    assert.equal(c.closed, true);
    await assert.rejects(c.listStreams(), /closed/);
    assert.equal(c.pending.length, 0);
  }
});

test("a request not answered in timeoutMs fails the connection, and close comes at once",
     async () => {
  const [c, ws] = await client({ timeoutMs: 50 });
  const events = [];
  c.on("error", (e) => events.push(["error", e.constructor.name]));
  c.on("close", (ev) => events.push(["close", ev.code]));
  // A stopped server: the WebSocket's own close event never comes.
  ws.close = () => events.push(["ws.close"]);
  const t0 = Date.now();
  const a = c.stats();
  const b = c.listStreams();
  await assert.rejects(a, TimeoutError);
  await assert.rejects(b, TimeoutError);
  assert.ok(Date.now() - t0 < 1000);
  assert.deepEqual(events, [["error", "TimeoutError"], ["ws.close"], ["close", 1006]]);
  assert.equal(c.closed, true);
  assert.equal(c.pending.length, 0);
  await assert.rejects(c.listStreams(), /closed/);
});

test("a reply in time stops its request's timer", async () => {
  const [c, ws] = await client({ timeoutMs: 50 });
  let closed = 0;
  c.on("close", () => closed++);
  const a = c.listStreams();
  ws.reply(MSG.STREAMS, { streams: [] });
  assert.deepEqual(await a, []);
  const b = c.subscribe({ all: true });
  ws.reply(MSG.ERROR, { code: 6, name: "STATE", message: "x", fatal: false });
  await assert.rejects(b, ServerError);
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal(closed, 0);
  assert.equal(c.closed, false);
});

test("ping() takes PONG, whose payload is PING's bytes rather than JSON", async () => {
  const [c, ws] = await client();
  const rtt = c.ping();
  assert.equal(ws.sent.at(-1).type, MSG.PING);
  ws.reply(MSG.PONG, new Uint8Array(0));
  assert.ok((await rtt) >= 0);
  assert.equal(c.closed, false);
});

test("connect() gives up on a server that never answers the handshake", async () => {
  let made = null;
  class SilentWs { // accepted by the kernel, never answered
    constructor(url) {
      this.url = url;
      this.closed = false;
      made = this;
    }
    close() {
      this.closed = true;
    }
  }
  const t0 = Date.now();
  await assert.rejects(AuralClient.connect("ws://127.0.0.1:1/ws",
                                           { WebSocket: SilentWs, timeoutMs: 50 }),
                       TimeoutError);
  assert.ok(Date.now() - t0 < 1000);
  assert.equal(made.closed, true);
});

// ---- a live aurald ------------------------------------------------------------

const AURALD = process.env.AURALD_BIN;
const MODEL = process.env.AURAL_TEST_MODEL;

async function startAurald(dir) {
  const p = spawn(AURALD, ["-m", MODEL, "-s", join(dir, "s"), "--threads", "1",
                           "--http", "127.0.0.1:0"], { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    const onData = (d) => {
      log += d;
      const m = /http: listening on http:\/\/127\.0\.0\.1:(\d+)\//.exec(log);
      if (m && log.includes("serving")) resolve(Number(m[1]));
    };
    p.stderr.on("data", onData);
    p.stdout.on("data", onData);
    p.on("exit", (code) => reject(new Error(`aurald exited ${code}: ${log}`)));
  });
  return { p, port, log: () => log };
}

test("a live aurald: push audio over /ws and receive its chunks",
     { skip: !AURALD || !MODEL }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "aural-js-"));
  const d = await startAurald(dir);
  try {
    const c = await AuralClient.connect(`ws://127.0.0.1:${d.port}/ws`, {
      WebSocket: globalThis.WebSocket ?? NodeWebSocket,
    });
    assert.equal(c.welcome.version, 1);
    const chunks = [];
    const ended = new Promise((resolve) => c.on("ended", resolve));
    c.on("chunk", (ch) => chunks.push(ch));
    await c.subscribe({ stream: "js", outputs: ["embeddings"] });
    const { stream } = await c.openAudio({ name: "js", sampleRate: 16000 });
    const x = new Float32Array(16000 * 2).map((_, i) => 0.3 * Math.sin(i * 0.05));
    c.sendAudio(stream, x);
    const done = await c.closeAudio(stream);
    const end = await ended;
    assert.equal(end.reason, "closed");
    assert.equal(chunks.length, done.chunks);
    assert.equal(chunks.reduce((n, ch) => n + ch.nFrames, 0), done.frames);
    assert.equal(chunks[0].embeddings.length, chunks[0].nFrames * c.model.d_model);
    c.close();
  } finally {
    const exited = new Promise((resolve) => d.p.on("exit", resolve));
    d.p.kill("SIGTERM");
    assert.equal(await exited, 0, d.log());
    rmSync(dir, { recursive: true, force: true });
  }
});
