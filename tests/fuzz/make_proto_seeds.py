#!/usr/bin/python3
"""Writes the seed corpus of the protocol fuzz target, tests/fuzz/corpus/proto/.

Each seed is one whole message as it travels on the wire (PROTOCOL.md §2): the
16-byte header, then the payload. Between them they cover each request the
server decodes (HELLO, SUBSCRIBE by name and for all streams, UNSUBSCRIBE,
AUDIO_OPEN with and without a name), every server message (WELCOME with a
vocabulary and a client id, STREAMS with a held stream, a STATS_REPLY page
with its cursors, SUBSCRIBED by name and for all, UNSUBSCRIBED,
STREAM_STARTED, STREAM_ENDED, GAP, AUDIO_OPENED, AUDIO_CLOSED, ERROR, PONG)
and replies with unusual escapes and numbers, binary payloads (PING,
AUDIO_DATA) and CHUNKs with each section, in f32 and f16. Deterministic: run
it again and nothing changes.

    /usr/bin/python3 tests/fuzz/make_proto_seeds.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "proto")

TYPES = {
    "HELLO": 0x01, "WELCOME": 0x02, "ERROR": 0x03, "PING": 0x04,
    "STREAMS": 0x07, "SUBSCRIBE": 0x08, "UNSUBSCRIBE": 0x0A, "CHUNK": 0x0E,
    "AUDIO_OPEN": 0x10, "AUDIO_DATA": 0x12, "STATS_REPLY": 0x16,
    "PONG": 0x05, "SUBSCRIBED": 0x09, "UNSUBSCRIBED": 0x0B,
    "STREAM_STARTED": 0x0C, "STREAM_ENDED": 0x0D, "GAP": 0x0F,
    "AUDIO_OPENED": 0x11, "AUDIO_CLOSED": 0x14, "WORDS": 0x17,
}


def message(kind, payload, stream_id=0):
    return struct.pack("<4sBBHII", b"AURL", 1, TYPES[kind], 0, stream_id,
                       len(payload)) + payload


def js(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def chunk(outputs, dtype, n_frames=2, d_model=3, vocab_size=4, text=b""):
    elem = 2 if dtype else 4
    fixed = struct.pack("<QQIIqqqqIIHBBI", 7, 7 * 50, n_frames, 1,
                        1795000000000000, 1795000000100000, 1795000000200000,
                        1795000000200500, d_model, vocab_size, outputs, dtype,
                        0, len(text) if outputs & 4 else 0)
    body = b""
    if outputs & 1:
        body += bytes(range(n_frames * d_model * elem))
    if outputs & 2:
        body += bytes(range(100, 100 + n_frames * vocab_size * elem))
    if outputs & 4:
        body += text
    return fixed + body


SEEDS = {
    "hello": message("HELLO", js({"versions": [1], "client": "my-tool 1.0"})),
    "hello_versions": message("HELLO", b'{"versions":[1,2,31],"client":"caf\\u00e9 \\ud83d\\ude00"}'),
    "subscribe_stream": message("SUBSCRIBE", js({"stream": "mic", "outputs": ["embeddings", "text"], "dtype": "f32"})),
    "subscribe_all": message("SUBSCRIBE", b' {"all" : true, "outputs": ["logits"], "dtype": "f16", "future": [null, {}]}\n'),
    "unsubscribe": message("UNSUBSCRIBE", js({"subscription": 5})),
    "audio_open": message("AUDIO_OPEN", js({"name": "call-17", "sample_rate": 8000, "channels": 1, "format": "s16"})),
    "audio_open_noname": message("AUDIO_OPEN", js({"sample_rate": 48000, "channels": 2, "format": "f32"})),
    "error": message("ERROR", js({"code": 7, "name": "NO_STREAM", "message": "no stream \"42\"\n", "fatal": False}), 42),
    "welcome": message("WELCOME", js({
        "version": 1, "server": "aurald 0.1.0", "max_request_bytes": 1048576,
        "max_message_bytes": 67108864,
        "model": {"sample_rate": 16000, "n_mels": 80, "frame_ms": 10,
                  "d_model": 256, "n_layers": 6, "window": 50,
                  "vocab_size": 3, "vocab": ["<b>", "a", "\u00e9"],
                  "chunk_frames": 50}})),
    "streams": message("STREAMS", js({"streams": [
        {"id": 3, "name": "speech.flac", "source": "file", "sample_rate": 22050,
         "channels": 1, "start_us": 1795000000000000, "frames": 1250,
         "chunks": 25}]})),
    "stats_reply": message("STATS_REPLY", b'{"uptime_s":12.5,"clients":3,"streams":[{"compute_s":0.31,'
                           b'"latency_ms_p50":4.1e0,"latency_ms_p99":-9.8E-1,"big":-9223372036854775808}]}'),
    "subscribe_both": message("SUBSCRIBE", js({"stream": "mic", "all": True})),
    "stats_long_number": message("STATS_REPLY", b'{"uptime_s":9007199254740993' + b"0" * 800 + b'1e-800}'),
    "ping": message("PING", b"\x00\x01\xfe\xffping"),
    "audio_data": message("AUDIO_DATA", struct.pack("<4h", 0, 1000, -1000, 32767), 9),
    "welcome_full": message("WELCOME", js({
        "version": 1, "server": "aurald 0.1.0", "max_request_bytes": 1048576,
        "max_message_bytes": 67108864,
        "model": {"sample_rate": 16000, "n_mels": 80, "frame_ms": 10,
                  "d_model": 256, "n_layers": 6, "window": 50,
                  "vocab_size": 40, "vocab": ["<b>"] + ["t%d" % i for i in range(38)] + ["\"\\"],
                  "chunk_frames": 50}, "client": 7})),
    "streams_held": message("STREAMS", js({"streams": [
        {"id": 3, "name": "speech.flac", "source": "file", "sample_rate": 22050,
         "channels": 1, "held": False, "start_us": 1795000000000000,
         "frames": 1250, "chunks": 25},
        {"id": 2, "name": "mic", "source": "mic", "sample_rate": 48000.5,
         "channels": 2, "held": True, "start_us": 0, "frames": 0,
         "chunks": 0}]})),
    "stats_reply_page": message("STATS_REPLY", js({
        "uptime_s": 12.5, "clients": 3, "workers": 2, "message_bytes": 1840,
        "streams_total": 300, "subscribers_total": 2,
        "streams": [{"id": 3, "name": "mic", "source": "mic", "sample_rate": 16000,
                     "channels": 1, "held": False, "start_us": 1795000000000000,
                     "frames": 1200, "chunks": 24, "audio_s": 12.0,
                     "compute_s": 0.31, "latency_ms_p50": 4.1,
                     "latency_ms_p99": 9.8, "overruns": 0, "rounds": 40}],
        "subscribers": [{"client": 7, "subscription": 2, "stream": "mic",
                         "all": False, "queue_bytes": 0, "chunks_sent": 24,
                         "chunks_dropped": 0},
                        {"client": 7, "subscription": 3, "stream": None,
                         "all": True, "queue_bytes": 10, "chunks_sent": 1,
                         "chunks_dropped": 5}],
        "next_streams_before": 3, "next_clients_before": 7})),
    "subscribed": message("SUBSCRIBED", js({"subscription": 5, "stream": "mic", "all": False, "outputs": ["embeddings", "text"], "dtype": "f32"})),
    "subscribed_all": message("SUBSCRIBED", js({"subscription": 1, "stream": None, "all": True, "outputs": ["logits"], "dtype": "f16"})),
    "unsubscribed": message("UNSUBSCRIBED", js({"subscription": 5})),
    "stream_started": message("STREAM_STARTED", js({"name": "mic", "source": "mic", "sample_rate": 48000, "channels": 1, "start_us": 1795000000000000, "next_chunk": 0}), 3),
    "stream_ended": message("STREAM_ENDED", js({"name": "mic", "reason": "error", "message": "bad \"audio\"\n", "frames": 740, "chunks": 15}), 3),
    "gap": message("GAP", js({"first_chunk": 40, "n_chunks": 12, "reason": "queue_full"}), 3),
    "audio_opened": message("AUDIO_OPENED", js({"stream": 9, "name": "call-17"}), 9),
    "audio_closed": message("AUDIO_CLOSED", js({"frames": 740, "chunks": 15}), 9),
    "pong": message("PONG", b"abc", 0),
    "words": message("WORDS", js({"seq": 3, "final": False, "segments": [
        [{"word": "the", "start": 12, "end": 20, "confidence": 0.5},
         {"word": "qu\u00efck", "start": 20, "end": 41, "confidence": 1}], []],
        "partial": [{"word": "brown", "start": 55, "end": 70,
                     "confidence": 0.25}]}), 3),
    "chunk_embeddings_f32": message("CHUNK", chunk(1, 0), 3),
    "chunk_all_f16": message("CHUNK", chunk(7, 1, text="h\u00e9llo w\u00f6rld".encode()), 3),
    "chunk_logits_text_f32": message("CHUNK", chunk(6, 0, n_frames=1, text=b""), 3),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
