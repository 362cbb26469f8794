// The live page of aurald --http: every stream's transcript, a scrolling
// posteriorgram and embedding heatmap, chunk latency; and the browser's
// microphone pushed as a stream of its own (AUDIO_OPEN / AUDIO_DATA).
import { AuralClient, softmaxRows } from "/aural-client.js";

const FRAME_PX = 2;          // canvas columns per frame
const SEND_EVERY_S = 0.02;   // microphone audio batched this long

const RETRY_FIRST_S = 1;     // reconnecting: the first wait, doubled
const RETRY_MAX_S = 10;      // after each failure up to this
const PING_EVERY_S = 5;      // is aurald still there? (see keepAlive)
// A page left open for weeks sees streams without end, and a stream
// (a microphone) may run for weeks: it keeps this much of them.
const KEEP_ENDED = 20;       // ended streams' cards, the latest to end
const KEEP_CHUNKS = 400;     // a stream's token text: its latest chunks'
const KEEP_WORDS = 2000;     // a stream's final words: the latest

const $ = (sel, root = document) => root.querySelector(sel);
const cards = new Map();     // stream id -> card state (this connection's)
let ended = [];              // ids of its ended streams' cards, oldest first
let client = null;
let mic = null;              // {stream, name, media, ctx} while pushing

// ---- colours ---------------------------------------------------------------

// t in [0, 1] to a dark-to-bright ramp (black, blue, green, yellow).
function ramp(t) {
  const stops = [[0, 0, 0], [30, 60, 160], [30, 170, 120], [250, 230, 60]];
  const x = Math.min(Math.max(t, 0), 1) * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  const f = x - i;
  return stops[i].map((a, k) => a + f * (stops[i + 1][k] - a));
}

// v in [-1, 1] to blue (negative), black, red (positive).
function diverging(v) {
  const a = Math.min(Math.abs(v), 1) * 255;
  return v < 0 ? [a * 0.3, a * 0.5, a] : [a, a * 0.35, a * 0.2];
}

// ---- canvases -----------------------------------------------------------------

// Scrolls a canvas left by n frames and draws them at its right edge:
// value(f, r) is the colour of frame f's row r.
function scrollColumns(canvas, nFrames, rows, rowPx, colour) {
  if (nFrames === 0) return;
  const g = canvas.getContext("2d");
  const w = nFrames * FRAME_PX;
  g.drawImage(canvas, -w, 0);
  const img = g.createImageData(w, rows * rowPx);
  for (let f = 0; f < nFrames; f++)
    for (let r = 0; r < rows; r++) {
      const [cr, cg, cb] = colour(f, r);
      for (let y = r * rowPx; y < (r + 1) * rowPx; y++)
        for (let x = f * FRAME_PX; x < (f + 1) * FRAME_PX; x++) {
          const o = 4 * (y * w + x);
          img.data[o] = cr;
          img.data[o + 1] = cg;
          img.data[o + 2] = cb;
          img.data[o + 3] = 255;
        }
    }
  g.putImageData(img, canvas.width - w, 0);
}

function drawPosteriors(card, ch) {
  const v = ch.vocabSize;
  const p = softmaxRows(ch.logits, v);
  scrollColumns(card.post, ch.nFrames, v, card.postRow, (f, r) => ramp(p[f * v + r] ** 0.5));
}

function drawEmbeddings(card, ch) {
  const d = ch.dModel;
  const e = ch.embeddings;
  let ss = 0;
  for (let i = 0; i < e.length; i++) ss += e[i] * e[i];
  if (e.length) card.embScale = 0.9 * card.embScale + 0.1 * Math.sqrt(ss / e.length);
  const s = 2 * (card.embScale || 1);
  scrollColumns(card.emb, ch.nFrames, d, card.embRow, (f, r) => diverging(Math.tanh(e[f * d + r] / s)));
}

// ---- stream cards ---------------------------------------------------------------

function makeCard(ev) {
  const node = $("#stream-card").content.firstElementChild.cloneNode(true);
  node.dataset.name = ev.name;
  node.dataset.id = ev.streamId;
  $(".name", node).textContent = ev.name;
  $(".source", node).textContent = `(${ev.source}, ${ev.sample_rate} Hz)`;
  $(".state", node).textContent = "live";
  const m = client.model;
  const card = {
    node, tokens: [], finals: [], partial: [],
    post: $(".posteriorgram", node), emb: $(".embeddings", node),
    postRow: Math.max(1, Math.min(6, Math.floor(200 / Math.max(1, m.vocab_size)))),
    embRow: Math.max(1, Math.floor(128 / m.d_model)), embScale: 0,
  };
  card.post.height = Math.max(1, m.vocab_size) * card.postRow;
  card.emb.height = m.d_model * card.embRow;
  if (!m.vocab_size) card.post.parentElement.hidden = true;
  if (mic && mic.stream === ev.streamId) node.classList.add("mine");
  const list = $("#streams");
  if (node.classList.contains("mine")) list.prepend(node);
  else list.append(node);
  $("#empty").hidden = true;
  cards.set(ev.streamId, card);
  return card;
}

function onChunk(ch) {
  const card = cards.get(ch.streamId);
  if (!card) return;
  if (ch.text) {
    card.tokens.push(ch.text);
    if (card.tokens.length > KEEP_CHUNKS) card.tokens.shift();
    $(".tokens", card.node).textContent = card.tokens.join(" ");
  }
  if (ch.logits) drawPosteriors(card, ch);
  if (ch.embeddings) drawEmbeddings(card, ch);
  $(".seq", card.node).textContent = ch.seq;
  $(".latency", card.node).textContent = (Date.now() - ch.readyUs / 1000).toFixed(0);
  $(".server-latency", card.node).textContent = ((ch.emittedUs - ch.readyUs) / 1000).toFixed(1);
}

function onWords(w) {
  const card = cards.get(w.streamId);
  if (!card) return;
  for (const seg of w.segments) card.finals.push(...seg.map((x) => x.word));
  if (card.finals.length > KEEP_WORDS)
    card.finals.splice(0, card.finals.length - KEEP_WORDS);
  card.partial = w.partial.map((x) => x.word);
  const el = $(".words", card.node);
  el.textContent = card.finals.join(" ");
  if (card.partial.length) {
    const span = document.createElement("span");
    span.className = "partial";
    span.textContent = (card.finals.length ? " " : "") + card.partial.join(" ");
    el.append(span);
  }
}

function onEnded(ev) {
  const card = cards.get(ev.streamId);
  if (!card) return;
  if (!card.node.classList.contains("ended")) ended.push(ev.streamId);
  card.node.classList.add("ended");
  $(".state", card.node).textContent = `ended (${ev.reason})`;
  while (ended.length > KEEP_ENDED) {
    const id = ended.shift();
    cards.get(id).node.remove();
    cards.delete(id);
  }
}

// ---- the microphone ----------------------------------------------------------------

async function startMic() {
  const media = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  const ctx = new AudioContext();
  await ctx.audioWorklet.addModule("/worklet.js");
  const src = ctx.createMediaStreamSource(media);
  const tap = new AudioWorkletNode(ctx, "pcm-tap");
  const { stream, name } = await client.openAudio({ sampleRate: ctx.sampleRate, format: "f32" });
  mic = { stream, name, media, ctx, parts: [], n: 0 };
  const batch = Math.round(ctx.sampleRate * SEND_EVERY_S);
  tap.port.onmessage = (e) => {
    if (!mic || mic.stream !== stream) return;
    mic.parts.push(e.data);
    mic.n += e.data.length;
    if (mic.n >= batch) flushMic();
  };
  src.connect(tap);
  tap.connect(ctx.destination); // pulled by the graph; it outputs silence
  $("#mic-state").textContent = `sending as "${name}" at ${ctx.sampleRate} Hz`;
}

function flushMic() {
  const out = new Float32Array(mic.n);
  let at = 0;
  for (const p of mic.parts) {
    out.set(p, at);
    at += p.length;
  }
  mic.parts = [];
  mic.n = 0;
  client.sendAudio(mic.stream, out);
}

// Stops capturing; the stream itself is closed by the caller (or gone
// with the connection).
async function releaseMic() {
  const m = mic;
  mic = null;
  m.media.getTracks().forEach((t) => t.stop());
  await m.ctx.close();
  const button = $("#mic");
  button.textContent = "use my microphone";
  button.classList.remove("on");
  return m;
}

async function stopMic() {
  if (mic.n) flushMic();
  const m = await releaseMic();
  $("#mic-state").textContent = `closing "${m.name}"…`;
  const r = await client.closeAudio(m.stream);
  $("#mic-state").textContent = `"${m.name}": ${r.frames} frames, ${r.chunks} chunks`;
}

async function toggleMic() {
  const button = $("#mic");
  button.disabled = true;
  try {
    if (mic) {
      await stopMic();
    } else {
      await startMic();
      button.textContent = "stop my microphone";
      button.classList.add("on");
    }
  } catch (e) {
    $("#mic-state").textContent = `microphone: ${e.message}`;
  } finally {
    button.disabled = false;
  }
}

// ---- start, and again whenever the connection is lost -----------------------------

// Connects and subscribes to every stream. A page left open (a wall
// display of a live feed) outlives a restart of aurald: when the
// connection goes, the streams it showed are marked as such and the page
// tries again, after 1 s, then 2, 4, up to 10 s between tries.
// The cards of a lost connection: shown, marked, until the next one
// lists what is live.
let stale = [];

async function connect() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  const c = await AuralClient.connect(url, { clientName: "aurald page" });
  const m = c.model;
  const outputs = ["embeddings"];
  if (m.vocab_size) outputs.push("logits", "text");
  if (m.words) outputs.push("words");
  c.on("started", makeCard);
  c.on("chunk", onChunk);
  c.on("words", onWords);
  c.on("ended", onEnded);
  c.on("close", () => onLost(c));
  try {
    await c.subscribe({ all: true, outputs });
  } catch (e) {
    c.close();
    throw e;
  }
  // The reply's continuation runs before the next message's handlers:
  // no stream event comes before client is set.
  client = c;
  keepAlive(c);
  for (const node of stale) node.remove();
  stale = [];
  $("#status").textContent = `connected to ${c.welcome.server}`;
  $("#model").textContent = `d_model ${m.d_model}, vocabulary ${m.vocab_size}` +
                            (m.words ? ", words" : "");
  $("#mic").disabled = false;
  document.body.dataset.ready = "1";
}

// A connection can die without closing: aurald stopped or hung, or a
// network change that leaves the TCP connection half-open, and the page
// would show a quiet feed for ever. A PING every few seconds, answered
// within the client's timeout (5 s), tells: one that is not fails the
// connection, and onLost takes it from there.
function keepAlive(c) {
  const timer = setInterval(() => {
    if (c !== client) return clearInterval(timer);
    c.ping().catch(() => {}); // a failure closes c, which onLost sees
  }, PING_EVERY_S * 1000);
}

function onLost(c) {
  if (c !== client) return; // a try that failed: its own catch retries
  client = null;
  document.body.dataset.ready = "";
  $("#mic").disabled = true;
  for (const [id, card] of cards) {
    if (!card.node.classList.contains("ended"))
      onEnded({ streamId: id, reason: "connection lost" });
    stale.push(card.node);
  }
  cards.clear(); // stream ids start again with the next connection
  ended = [];
  if (mic)
    releaseMic().then((m) => {
      $("#mic-state").textContent = `"${m.name}" ended: the connection was lost`;
    });
  retry(RETRY_FIRST_S);
}

function retry(waitS) {
  $("#status").textContent = `disconnected; trying again in ${waitS} s`;
  setTimeout(async () => {
    $("#status").textContent = "reconnecting…";
    try {
      await connect();
    } catch (e) {
      retry(Math.min(2 * waitS, RETRY_MAX_S));
    }
  }, waitS * 1000);
}

$("#mic").disabled = true; // until connected
$("#mic").addEventListener("click", toggleMic);
connect().catch((e) => {
  $("#status").textContent = `error: ${e.message}`;
  retry(RETRY_FIRST_S);
});
