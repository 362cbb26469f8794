// A small WebSocket client for Node versions without a global WebSocket
// (Debian 12's Node 18; Node 20 without --experimental-websocket): the
// subset of the browser's API that aural-client.js uses (binaryType
// "arraybuffer", onopen, onmessage, onclose, onerror, send, close), over
// RFC 6455 on a plain TCP socket: ws:// URLs, binary messages, no
// extensions. The tests and ws-dump.mjs use it when Node has no
// WebSocket of its own:
//   AuralClient.connect(url, { WebSocket: globalThis.WebSocket ?? NodeWebSocket })

import { createHash, randomBytes } from "node:crypto";
import { connect } from "node:net";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

export class NodeWebSocket {
  #sock;
  #buf = Buffer.alloc(0);
  #open = false;
  #parts = [];
  binaryType = "arraybuffer";
  onopen = null;
  onmessage = null;
  onclose = null;
  onerror = null;

  constructor(url, protocols) {
    const u = new URL(url);
    if (u.protocol !== "ws:") throw new Error(`${url}: only ws:// here`);
    const key = randomBytes(16).toString("base64");
    this.#sock = connect(Number(u.port || 80), u.hostname, () => {
      const lines = [
        `GET ${u.pathname}${u.search} HTTP/1.1`,
        `Host: ${u.host}`,
        "Upgrade: websocket",
        "Connection: Upgrade",
        `Sec-WebSocket-Key: ${key}`,
        "Sec-WebSocket-Version: 13",
        `Origin: http://${u.host}`,
      ];
      if (protocols) lines.push(`Sec-WebSocket-Protocol: ${[protocols].flat().join(", ")}`);
      this.#sock.write(lines.join("\r\n") + "\r\n\r\n");
    });
    const accept = createHash("sha1").update(key + GUID).digest("base64");
    this.#sock.on("data", (d) => this.#onData(d, accept));
    this.#sock.on("error", (e) => this.onerror?.({ error: e }));
    this.#sock.on("close", () => this.#closed(1006));
  }

  #onData(d, accept) {
    this.#buf = Buffer.concat([this.#buf, d]);
    if (!this.#open) {
      const end = this.#buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = this.#buf.subarray(0, end).toString();
      this.#buf = this.#buf.subarray(end + 4);
      if (!/^HTTP\/1\.1 101/.test(head) || !head.includes(accept)) {
        this.onerror?.({ error: new Error(head.split("\r\n")[0]) });
        this.#sock.destroy();
        return;
      }
      this.#open = true;
      this.onopen?.({});
    }
    while (this.#frame());
  }

  // Takes one whole frame from the buffer, if there is one.
  #frame() {
    const b = this.#buf;
    if (b.length < 2) return false;
    let n = b[1] & 0x7f, at = 2;
    if (n === 126) {
      if (b.length < 4) return false;
      n = b.readUInt16BE(2);
      at = 4;
    } else if (n === 127) {
      if (b.length < 10) return false;
      n = Number(b.readBigUInt64BE(2));
      at = 10;
    }
    if (b.length < at + n) return false;
    const op = b[0] & 0x0f, fin = (b[0] & 0x80) !== 0;
    const payload = b.subarray(at, at + n);
    this.#buf = b.subarray(at + n);
    if (op === 8) {
      this.#closed(n >= 2 ? payload.readUInt16BE(0) : 1005);
      return false;
    }
    if (op === 9) this.#send(10, payload);
    if (op === 0 || op === 1 || op === 2) {
      this.#parts.push(Buffer.from(payload));
      if (fin) {
        const all = Buffer.concat(this.#parts);
        this.#parts = [];
        const data = all.buffer.slice(all.byteOffset, all.byteOffset + all.length);
        this.onmessage?.({ data });
      }
    }
    return true;
  }

  #send(op, payload) {
    const n = payload.length, mask = randomBytes(4);
    const head = n < 126 ? Buffer.from([0x80 | op, 0x80 | n])
      : n < 65536 ? Buffer.from([0x80 | op, 0x80 | 126, n >> 8, n & 255])
      : Buffer.concat([Buffer.from([0x80 | op, 0x80 | 127]),
                       (() => { const x = Buffer.alloc(8); x.writeBigUInt64BE(BigInt(n)); return x; })()]);
    const body = Buffer.alloc(n);
    for (let i = 0; i < n; i++) body[i] = payload[i] ^ mask[i & 3];
    this.#sock.write(Buffer.concat([head, mask, body]));
  }

  send(data) {
    const view = data instanceof ArrayBuffer ? new Uint8Array(data)
      : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    this.#send(2, Buffer.from(view));
  }

  close(code = 1000) {
    if (!this.#open) return this.#sock.destroy();
    const p = Buffer.alloc(2);
    p.writeUInt16BE(code);
    this.#send(8, p);
    this.#sock.end();
  }

  #closed(code) {
    if (this.#sock.destroyed && !this.#open) return;
    this.#open = false;
    this.#sock.destroy();
    const cb = this.onclose;
    this.onclose = null;
    cb?.({ code });
  }
}
