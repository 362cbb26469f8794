// aural-client.js: a client of aurald's protocol (proto/PROTOCOL.md) over
// its WebSocket endpoint (/ws, `aurald --http`), as an ES module with no
// build step, for browsers and Node (give Node a WebSocket class: Node 20
// has one with --experimental-websocket).
//
//   import { AuralClient } from "./aural-client.js";
//   const c = await AuralClient.connect("ws://127.0.0.1:8080/ws");
//   c.on("chunk", (ch) => console.log(ch.name, ch.seq, ch.text));
//   await c.subscribe({ all: true, outputs: ["logits", "text"] });
//   const { stream } = await c.openAudio({ sampleRate: 48000, format: "f32" });
//   c.sendAudio(stream, new Float32Array(4800));
//   await c.closeAudio(stream);
//
// Every message is one binary WebSocket message. Requests are answered in
// order (PROTOCOL.md §3): each request's promise takes the next reply, or
// rejects with a ServerError. Events (started, chunk, words, gap, ended,
// error, close) go to the handlers given to on().
//
// A server that does not answer fails the connection: connecting and each
// request (closeAudio() aside, which waits for the rest of the stream to
// be computed) wait at most timeoutMs (default 5000; 0: for ever), then
// reject with a TimeoutError, and "close" follows at once. A stopped or
// unreachable server (a half-open TCP connection after a network change)
// otherwise looks like a quiet one; ping() every few seconds finds it out.

export const MAGIC = 0x4c525541; // "AURL"
export const VERSION = 1;
export const HEADER_BYTES = 16;
export const CHUNK_FIXED_BYTES = 72;

export const MSG = Object.freeze({
  HELLO: 0x01, WELCOME: 0x02, ERROR: 0x03, PING: 0x04, PONG: 0x05,
  LIST_STREAMS: 0x06, STREAMS: 0x07, SUBSCRIBE: 0x08, SUBSCRIBED: 0x09,
  UNSUBSCRIBE: 0x0a, UNSUBSCRIBED: 0x0b, STREAM_STARTED: 0x0c,
  STREAM_ENDED: 0x0d, CHUNK: 0x0e, GAP: 0x0f, AUDIO_OPEN: 0x10,
  AUDIO_OPENED: 0x11, AUDIO_DATA: 0x12, AUDIO_CLOSE: 0x13,
  AUDIO_CLOSED: 0x14, STATS: 0x15, STATS_REPLY: 0x16, WORDS: 0x17,
});

// The types a server sends; the replies among them answer requests in order.
const SERVER_TYPES = new Set([
  MSG.WELCOME, MSG.ERROR, MSG.PONG, MSG.STREAMS, MSG.SUBSCRIBED,
  MSG.UNSUBSCRIBED, MSG.STREAM_STARTED, MSG.STREAM_ENDED, MSG.CHUNK, MSG.GAP,
  MSG.AUDIO_OPENED, MSG.AUDIO_CLOSED, MSG.STATS_REPLY, MSG.WORDS,
]);
const UNSOLICITED = new Set([
  MSG.ERROR, MSG.STREAM_STARTED, MSG.STREAM_ENDED, MSG.CHUNK, MSG.GAP,
  MSG.WORDS, MSG.AUDIO_CLOSED,
]);

// Error codes whose ERROR, carrying a stream id, can be about AUDIO_DATA
// rather than a reply (PROTOCOL.md 4.13).
const AUDIO_ERRORS = new Set([5, 7, 11]); // BAD_PAYLOAD, NO_STREAM, AUDIO

export class ProtocolError extends Error {}

// The server did not answer within the client's timeoutMs.
export class TimeoutError extends Error {}

export const DEFAULT_TIMEOUT_MS = 5000;

export class ServerError extends Error {
  constructor(e, streamId) {
    super(`${e.name}: ${e.message}`);
    this.code = e.code;
    this.codeName = e.name;
    this.fatal = !!e.fatal;
    this.streamId = streamId;
  }
}

const utf8 = new TextEncoder();
const utf8dec = new TextDecoder("utf-8", { fatal: false });
const utf8strict = new TextDecoder("utf-8", { fatal: true });

// ---- framing ---------------------------------------------------------------

// One message: header and payload (bytes, a JSON object, or nothing).
export function encodeMessage(type, payload, streamId = 0) {
  let body;
  if (payload === undefined || payload === null) body = new Uint8Array(0);
  else if (payload instanceof Uint8Array) body = payload;
  else if (ArrayBuffer.isView(payload))
    body = new Uint8Array(payload.buffer, payload.byteOffset, payload.byteLength);
  else body = utf8.encode(JSON.stringify(payload));
  const out = new Uint8Array(HEADER_BYTES + body.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, MAGIC, true);
  v.setUint8(4, VERSION);
  v.setUint8(5, type);
  v.setUint16(6, 0, true);
  v.setUint32(8, streamId >>> 0, true);
  v.setUint32(12, body.length, true);
  out.set(body, HEADER_BYTES);
  return out;
}

// The header and payload of one received message (a whole WebSocket
// message); throws ProtocolError when it is not exactly one message.
export function decodeMessage(buf) {
  const bytes = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
  if (bytes.length < HEADER_BYTES)
    throw new ProtocolError(`a message of ${bytes.length} bytes has no header`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const magic = v.getUint32(0, true);
  if (magic !== MAGIC)
    throw new ProtocolError(`bad magic 0x${magic.toString(16)}`);
  const version = v.getUint8(4);
  if (version !== VERSION)
    throw new ProtocolError(`protocol version ${version}`);
  const n = v.getUint32(12, true);
  if (bytes.length !== HEADER_BYTES + n)
    throw new ProtocolError(`a message of ${bytes.length} bytes whose ` +
                            `header says ${HEADER_BYTES + n}`);
  return {
    type: v.getUint8(5),
    flags: v.getUint16(6, true),
    streamId: v.getUint32(8, true),
    payload: bytes.subarray(HEADER_BYTES),
  };
}

// A JSON payload: one object in UTF-8 (PROTOCOL.md §2); ProtocolError when
// it is anything else.
export function decodeJson(payload) {
  let obj;
  try {
    obj = JSON.parse(utf8strict.decode(payload));
  } catch (e) {
    throw new ProtocolError(`a JSON payload that does not parse: ${e.message}`);
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj))
    throw new ProtocolError("a JSON payload that is not an object");
  return obj;
}

// ---- CHUNK ---------------------------------------------------------------------

// IEEE half to float, exactly.
export function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

function readMatrix(bytes, at, count, dtype) {
  const out = new Float32Array(count);
  const v = new DataView(bytes.buffer, bytes.byteOffset + at, count * (dtype ? 2 : 4));
  for (let i = 0; i < count; i++)
    out[i] = dtype ? f16ToF32(v.getUint16(2 * i, true)) : v.getFloat32(4 * i, true);
  return out;
}

// A CHUNK payload (PROTOCOL.md §5): its fixed fields and the sections it
// carries (embeddings and logits as row-major Float32Arrays, text).
export function decodeChunk(payload) {
  if (payload.length < CHUNK_FIXED_BYTES)
    throw new ProtocolError(`CHUNK of ${payload.length} bytes (at least 72)`);
  const v = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  const u64 = (o) => Number(v.getBigUint64(o, true));
  const i64 = (o) => Number(v.getBigInt64(o, true));
  const c = {
    seq: u64(0), firstFrame: u64(8), nFrames: v.getUint32(16, true),
    final: (v.getUint32(20, true) & 1) !== 0, startUs: i64(24),
    captureUs: i64(32), readyUs: i64(40), emittedUs: i64(48),
    dModel: v.getUint32(56, true), vocabSize: v.getUint32(60, true),
    outputs: v.getUint16(64, true), dtype: v.getUint8(66),
    embeddings: null, logits: null, text: null,
  };
  const textBytes = v.getUint32(68, true);
  // What §5 does not define is refused, as the C decoder refuses it: a
  // dtype other than 0 (f32) and 1 (f16) would otherwise be read as f16.
  if (c.dtype > 1) throw new ProtocolError(`CHUNK with unknown dtype ${c.dtype}`);
  if (c.outputs & ~7)
    throw new ProtocolError(`CHUNK with unknown outputs 0x${c.outputs.toString(16)}`);
  if (textBytes !== 0 && !(c.outputs & 4))
    throw new ProtocolError("CHUNK has text_bytes but no text section");
  if (c.nFrames === 0 && !c.final)
    throw new ProtocolError("CHUNK of 0 frames that is not the FINAL one");
  const size = c.dtype ? 2 : 4;
  let at = CHUNK_FIXED_BYTES;
  const need = (c.outputs & 1 ? c.nFrames * c.dModel * size : 0) +
               (c.outputs & 2 ? c.nFrames * c.vocabSize * size : 0) +
               (c.outputs & 4 ? textBytes : 0);
  if (payload.length !== at + need)
    throw new ProtocolError(`CHUNK of ${payload.length} bytes; its fields ` +
                            `say ${at + need}`);
  if (c.outputs & 1) {
    c.embeddings = readMatrix(payload, at, c.nFrames * c.dModel, c.dtype);
    at += c.nFrames * c.dModel * size;
  }
  if (c.outputs & 2) {
    c.logits = readMatrix(payload, at, c.nFrames * c.vocabSize, c.dtype);
    at += c.nFrames * c.vocabSize * size;
  }
  if (c.outputs & 4) c.text = utf8dec.decode(payload.subarray(at, at + textBytes));
  return c;
}

// Per-frame probabilities (softmax over the vocabulary) of a chunk's
// logits: nFrames rows of vocabSize.
export function softmaxRows(logits, vocabSize) {
  const out = new Float32Array(logits.length);
  for (let r = 0; r < logits.length; r += vocabSize) {
    let max = -Infinity;
    for (let k = 0; k < vocabSize; k++) max = Math.max(max, logits[r + k]);
    let sum = 0;
    for (let k = 0; k < vocabSize; k++) {
      out[r + k] = Math.exp(logits[r + k] - max);
      sum += out[r + k];
    }
    for (let k = 0; k < vocabSize; k++) out[r + k] /= sum;
  }
  return out;
}

// ---- the client ---------------------------------------------------------------------

export class AuralClient {
  // ws: an open WebSocket (browser or Node); use connect() to make one.
  // options: timeoutMs, how long a request waits for its reply.
  constructor(ws, { timeoutMs = DEFAULT_TIMEOUT_MS } = {}) {
    this.ws = ws;
    this.timeoutMs = timeoutMs;
    ws.binaryType = "arraybuffer";
    this.handlers = {};
    this.pending = [];        // requests awaiting their reply, in order
    this.closing = new Map(); // stream id -> AUDIO_CLOSE awaiting AUDIO_CLOSED
    this.audio = new Map();   // our open streams: id -> {format, channels}
    this.names = new Map();   // stream id -> name
    this.welcome = null;
    this.closed = false;
    ws.onmessage = (ev) => this.#onMessage(ev.data);
    ws.onclose = (ev) => this.#onClose(ev);
  }

  // Connects, says HELLO and waits for WELCOME. options: WebSocket (the
  // class, default globalThis.WebSocket), clientName, protocols,
  // timeoutMs (for the opening handshake, then each request).
  static async connect(url, options = {}) {
    const Ctor = options.WebSocket || globalThis.WebSocket;
    if (!Ctor) throw new Error("no WebSocket class: pass options.WebSocket");
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const ws = new Ctor(url, options.protocols);
    ws.binaryType = "arraybuffer";
    let timer;
    try {
      await new Promise((resolve, reject) => {
        ws.onopen = resolve;
        ws.onerror = () => reject(new Error(`cannot open ${url}`));
        ws.onclose = (ev) => reject(new Error(`${url} closed (${ev.code})`));
        // The kernel of a stopped server still accepts the connection:
        // only its handshake never comes.
        if (timeoutMs > 0)
          timer = setTimeout(() => reject(new TimeoutError(
            `${url} did not answer the WebSocket handshake in ${timeoutMs} ms`)),
                             timeoutMs);
      });
    } catch (e) {
      ws.onopen = ws.onerror = ws.onclose = null;
      ws.close();
      throw e;
    } finally {
      clearTimeout(timer);
    }
    const c = new AuralClient(ws, { timeoutMs });
    await c.hello(options.clientName || "aural-client.js 1");
    return c;
  }

  on(event, fn) {
    (this.handlers[event] ||= []).push(fn);
    return this;
  }

  #emit(event, value) {
    for (const fn of this.handlers[event] || []) fn(value);
  }

  #send(type, payload, streamId = 0) {
    if (this.closed) throw new Error("the connection is closed");
    this.ws.send(encodeMessage(type, payload, streamId));
  }

  // A request whose reply has not come in timeoutMs fails the connection:
  // the replies are matched to requests by their order, so one that comes
  // late could not be told from the next request's.
  #request(type, payload, reply, streamId = 0) {
    return new Promise((resolve, reject) => {
      this.#send(type, payload, streamId); // throws when closed
      const p = { type, reply, resolve, reject, timer: null };
      if (this.timeoutMs > 0)
        p.timer = setTimeout(() => this.#fail(new TimeoutError(
          `aurald did not answer in ${this.timeoutMs} ms`)), this.timeoutMs);
      this.pending.push(p);
    });
  }

  // Every request and stream close waiting fails with err.
  #rejectAll(err) {
    while (this.pending.length > 0) this.#takeOldest().reject(err);
    for (const p of this.closing.values()) p.reject(err);
    this.closing.clear();
  }

  // The server broke the protocol or stopped answering: every request
  // waiting fails with err, the "error" handlers see it, and the
  // connection is closed (what it would send next cannot be trusted, nor
  // matched with the requests). "close" comes at once: a browser's close
  // event waits for a closing handshake that a stopped server never
  // sends.
  #fail(err) {
    if (this.closed) return;
    this.closed = true;
    this.#rejectAll(err);
    this.#emit("error", err);
    this.ws.onmessage = this.ws.onclose = null;
    this.ws.close();
    this.#emit("close", { code: 1006, reason: err.message, wasClean: false });
  }

  #onClose(ev) {
    this.closed = true;
    this.#rejectAll(new Error(`aurald closed the WebSocket (${ev.code})`));
    this.#emit("close", ev);
  }

  // The server's bytes are checked whole before anything acts on them: a
  // message that does not decode, or a reply no request is waiting for,
  // fails the connection instead of throwing out of the WebSocket's
  // handler with the requests left waiting for ever.
  #onMessage(data) {
    if (this.closed) return;
    let m, body;
    try {
      if (typeof data === "string")
        throw new ProtocolError("a text WebSocket message");
      m = decodeMessage(ArrayBuffer.isView(data)
        ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
        : new Uint8Array(data));
      if (!SERVER_TYPES.has(m.type))
        throw new ProtocolError(`message type 0x${m.type.toString(16)} from the server`);
      body = m.type === MSG.CHUNK ? decodeChunk(m.payload)
        : m.type === MSG.PONG ? m.payload // opaque: PING's bytes
        : decodeJson(m.payload);
      if (!UNSOLICITED.has(m.type) && this.pending[0]?.reply !== m.type)
        throw new ProtocolError(`unexpected message 0x${m.type.toString(16)}`);
    } catch (e) {
      this.#fail(e instanceof ProtocolError ? e : new ProtocolError(String(e)));
      return;
    }
    if (m.type === MSG.CHUNK) {
      body.streamId = m.streamId;
      body.name = this.names.get(m.streamId);
      this.#emit("chunk", body);
    } else if (m.type === MSG.ERROR) {
      this.#onError(body, m.streamId);
    } else if (m.type === MSG.PONG) {
      this.#takeOldest().resolve(body);
    } else {
      this.#onJson(m.type, m.streamId, body);
    }
  }

  #onJson(type, streamId, obj) {
    switch (type) {
      case MSG.STREAM_STARTED:
        this.names.set(streamId, obj.name);
        return this.#emit("started", { streamId, ...obj });
      case MSG.STREAM_ENDED: // the stream's last message
        this.names.delete(streamId);
        return this.#emit("ended", { streamId, ...obj });
      case MSG.WORDS:
        return this.#emit("words", { streamId, name: this.names.get(streamId), ...obj });
      case MSG.GAP:
        return this.#emit("gap", { streamId, name: this.names.get(streamId), ...obj });
      case MSG.AUDIO_CLOSED: {
        const p = this.closing.get(streamId);
        this.closing.delete(streamId);
        this.audio.delete(streamId);
        this.names.delete(streamId);
        if (p) p.resolve(obj);
        return;
      }
    }
    if (type === MSG.AUDIO_OPENED) obj.stream = streamId;
    this.#takeOldest().resolve(obj); // #onMessage checked it is this reply's
  }

  // The oldest request waiting, no longer timed.
  #takeOldest() {
    const p = this.pending.shift();
    clearTimeout(p.timer);
    return p;
  }

  #onError(e, streamId) {
    const err = new ServerError(e, streamId);
    if (streamId !== 0 && this.closing.has(streamId) && e.code === 7) {
      const p = this.closing.get(streamId);
      this.closing.delete(streamId);
      return p.reject(err);
    }
    const aboutAudio = streamId !== 0 && this.audio.has(streamId) &&
                       AUDIO_ERRORS.has(e.code);
    if (!aboutAudio && !e.fatal && this.pending.length > 0)
      return this.#takeOldest().reject(err);
    if (e.fatal)
      while (this.pending.length > 0) this.#takeOldest().reject(err);
    this.#emit("error", err);
  }

  // ---- requests ------------------------------------------------------------------

  async hello(clientName) {
    // "client" is at most 64 bytes of UTF-8 (PROTOCOL.md §4.1), cut between
    // characters: the server refuses a longer one, and the connection.
    const name = utf8.encode(String(clientName ?? ""));
    let end = Math.min(name.length, 64);
    while (end < name.length && end > 0 && (name[end] & 0xc0) === 0x80) end--;
    const client = utf8dec.decode(name.subarray(0, end));
    const w = await this.#request(MSG.HELLO, { versions: [VERSION], client },
                                  MSG.WELCOME);
    // What the client relies on (sendAudio sizes its messages by
    // max_request_bytes; a missing one made it send nothing at all).
    const count = (x, min) => Number.isSafeInteger(x) && x >= min;
    const m = w.model;
    const bad = w.version !== VERSION ? "version"
      : !count(w.max_request_bytes, 16) ? "max_request_bytes"
      : !count(w.max_message_bytes, 1024) ? "max_message_bytes"
      : m === null || typeof m !== "object" || Array.isArray(m) ? "model"
      : !count(m.vocab_size, 0) || !Array.isArray(m.vocab) ||
        m.vocab.length !== m.vocab_size ? "model.vocab" : null;
    if (bad !== null) {
      const err = new ProtocolError(`WELCOME has no valid ${bad}`);
      this.#fail(err);
      throw err;
    }
    this.welcome = w;
    this.model = w.model;
    return w;
  }

  // {stream: NAME} or {all: true}; outputs; dtype.
  subscribe({ stream, all = false, outputs = ["embeddings"], dtype = "f32" }) {
    const req = { outputs, dtype };
    if (all) req.all = true;
    else req.stream = stream;
    return this.#request(MSG.SUBSCRIBE, req, MSG.SUBSCRIBED);
  }

  unsubscribe(subscription) {
    return this.#request(MSG.UNSUBSCRIBE, { subscription }, MSG.UNSUBSCRIBED);
  }

  // Resolves to the round trip in milliseconds; it includes the messages
  // already queued for this client (PROTOCOL.md §4.4).
  async ping() {
    const t0 = performance.now();
    await this.#request(MSG.PING, null, MSG.PONG);
    return performance.now() - t0;
  }

  async listStreams() {
    return (await this.#request(MSG.LIST_STREAMS, null, MSG.STREAMS)).streams;
  }

  stats(page = null) {
    return this.#request(MSG.STATS, page, MSG.STATS_REPLY);
  }

  // Resolves to {stream, name}.
  async openAudio({ name, sampleRate = 16000, channels = 1, format = "f32" } = {}) {
    const req = { sample_rate: sampleRate, channels, format };
    if (name) req.name = name;
    const r = await this.#request(MSG.AUDIO_OPEN, req, MSG.AUDIO_OPENED);
    this.audio.set(r.stream, { format, channels });
    this.names.set(r.stream, r.name);
    return r;
  }

  // Samples: a Float32Array (f32 streams; ±1 full scale) or an Int16Array
  // (s16), interleaved; sent in messages within the server's limit.
  sendAudio(streamId, samples) {
    const a = this.audio.get(streamId);
    if (!a) throw new Error(`stream ${streamId} was not opened here`);
    const want = a.format === "s16" ? Int16Array : Float32Array;
    if (!(samples instanceof want))
      throw new TypeError(`stream ${streamId} takes a ${want.name}`);
    const frame = a.channels * samples.BYTES_PER_ELEMENT;
    const max = Math.max(frame, Math.floor(this.welcome.max_request_bytes / frame) * frame);
    const bytes = new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength);
    for (let at = 0; at < bytes.length; at += max)
      this.#send(MSG.AUDIO_DATA, bytes.slice(at, at + max), streamId);
  }

  // Resolves to {frames, chunks} once the server has computed the rest.
  closeAudio(streamId) {
    return new Promise((resolve, reject) => {
      this.closing.set(streamId, { resolve, reject });
      this.#send(MSG.AUDIO_CLOSE, null, streamId);
    });
  }

  close() {
    this.closed = true;
    this.ws.close();
  }
}
