#!/usr/bin/python3
"""Writes the seed corpus of fuzz_audiofile into corpus/audiofile/.

Small audio files (each under 8 kB): valid WAVs written here byte by byte
(16-bit, 32-bit float, 8-bit, 24-bit, 64-bit float, stereo, 6 channels,
WAVE_FORMAT_EXTENSIBLE, extra chunks before the data, odd chunk padding),
AIFF and AIFF-C written here too, other containers and codecs converted by
sox from one of those (FLAC, Ogg/Vorbis, Sun .au, CAF, W64, IMA ADPCM,
MS ADPCM, GSM, mu-law, A-law, IRCAM, NIST), and edge cases one step from
valid (declared lengths that are unknown, zero or too long, rate 0, 0
channels, a NaN sample, a single frame).

The WAV and AIFF seeds are deterministic; the sox ones depend on the sox
version installed. Run from anywhere:
    tests/fuzz/make_audiofile_seeds.py
"""

import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "audiofile")


def ramp(n_frames, n_channels, rate=16000):
    """Interleaved samples in [-1, 1): a tone per channel."""
    out = []
    for i in range(n_frames):
        for c in range(n_channels):
            out.append(0.5 * math.sin(2 * math.pi * (220 * (c + 1)) * i / rate))
    return out


def pcm(samples, bits):
    if bits == 8:  # unsigned
        return bytes(max(0, min(255, int(round(s * 128)) + 128))
                     for s in samples)
    scale = 1 << (bits - 1)
    b = bytearray()
    for s in samples:
        v = max(-scale, min(scale - 1, int(round(s * scale))))
        b += (v & ((1 << bits) - 1)).to_bytes(bits // 8, "little")
    return bytes(b)


def floats(samples, bits):
    return struct.pack("<%d%s" % (len(samples), "f" if bits == 32 else "d"),
                       *samples)


def chunk(tag, body):
    return tag + struct.pack("<I", len(body)) + body + (b"\0" if len(body) & 1
                                                        else b"")


def fmt_body(tag, channels, rate, bits):
    block = channels * bits // 8
    return struct.pack("<HHIIHH", tag, channels, rate, rate * block, block,
                       bits)


def wav(channels, rate, bits, data, tag=1, data_size=None, extra=b"",
        riff_size=None, fmt=None):
    body = b"WAVE" + chunk(b"fmt ", fmt or fmt_body(tag, channels, rate,
                                                    bits)) + extra
    size = len(data) if data_size is None else data_size
    body += b"data" + struct.pack("<I", size) + data
    if len(data) & 1 and data_size is None:
        body += b"\0"
    return b"RIFF" + struct.pack("<I", riff_size if riff_size is not None
                                 else len(body)) + body


def extensible(channels, rate, bits, data, sub_tag):
    block = channels * bits // 8
    guid = struct.pack("<H", sub_tag) + bytes.fromhex(
        "000000001000800000aa00389b71")
    body = (struct.pack("<HHIIHH", 0xFFFE, channels, rate, rate * block,
                        block, bits) +
            struct.pack("<HHI", 22, bits, (1 << channels) - 1) + guid)
    return wav(channels, rate, bits, data, fmt=body)


def ieee_extended(x):
    """An 80-bit big-endian IEEE extended float (AIFF's sample rate)."""
    e, m = 16383 + 31, int(x)
    while m and not m & 0x80000000:
        m <<= 1
        e -= 1
    return struct.pack(">HI", e, m) + b"\0\0\0\0"


def aiff(channels, rate, samples16, aifc=False):
    n = len(samples16) // channels
    data = b"".join(struct.pack(">h", max(-32768, min(32767,
                                                      int(s * 32768))))
                    for s in samples16)
    comm = struct.pack(">hIh", channels, n, 16) + ieee_extended(rate)
    if aifc:
        comm += b"NONE" + b"\x0enot compressed\0"
    body = b"AIFC" if aifc else b"AIFF"
    if aifc:
        body += b"FVER" + struct.pack(">II", 4, 0xA2805140)
    body += b"COMM" + struct.pack(">I", len(comm)) + comm
    ssnd = struct.pack(">II", 0, 0) + data
    body += b"SSND" + struct.pack(">I", len(ssnd)) + ssnd
    return b"FORM" + struct.pack(">I", len(body)) + body


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    seeds = {}
    mono = ramp(800, 1)
    seeds["s16_mono_16k.wav"] = wav(1, 16000, 16, pcm(mono, 16))
    seeds["f32_mono_16k.wav"] = wav(1, 16000, 32, floats(mono, 32), tag=3)
    seeds["f64_mono_8k.wav"] = wav(1, 8000, 64, floats(ramp(300, 1, 8000),
                                                       64), tag=3)
    seeds["u8_mono_8k.wav"] = wav(1, 8000, 8, pcm(ramp(1000, 1, 8000), 8))
    seeds["s24_mono_48k.wav"] = wav(1, 48000, 24, pcm(ramp(600, 1, 48000),
                                                      24))
    seeds["s16_stereo_44k.wav"] = wav(2, 44100, 16, pcm(ramp(600, 2, 44100),
                                                        16))
    seeds["s16_6ch_22k.wav"] = wav(6, 22050, 16, pcm(ramp(200, 6, 22050), 16))
    seeds["ext_s16_stereo.wav"] = extensible(2, 16000, 16,
                                             pcm(ramp(400, 2), 16), 1)
    seeds["ext_f32_mono.wav"] = extensible(1, 16000, 32, floats(mono, 32), 3)
    seeds["list_chunk_before_data.wav"] = wav(
        1, 16000, 16, pcm(mono[:300], 16),
        extra=chunk(b"LIST", b"INFOINAM" + struct.pack("<I", 5) + b"title\0")
        + chunk(b"junk", b"abc"))
    seeds["one_frame.wav"] = wav(1, 16000, 16, pcm([0.25], 16))
    seeds["s16_384k.wav"] = wav(1, 384000, 16, pcm(ramp(2000, 1, 384000), 16))
    # One step from valid.
    seeds["unknown_length.wav"] = wav(1, 16000, 16, pcm(mono, 16),
                                      data_size=0xFFFFFFFF,
                                      riff_size=0xFFFFFFFF)
    seeds["zero_length_with_data.wav"] = wav(1, 16000, 16, pcm(mono, 16),
                                             data_size=0, riff_size=0)
    seeds["truncated_data.wav"] = wav(1, 16000, 16, pcm(mono, 16),
                                      data_size=4000)
    seeds["rate0.wav"] = wav(1, 0, 16, pcm(mono[:100], 16))
    seeds["channels0.wav"] = wav(0, 16000, 16, pcm(mono[:100], 16))
    seeds["block_align0.wav"] = wav(1, 16000, 16, pcm(mono[:100], 16),
                                    fmt=struct.pack("<HHIIHH", 1, 1, 16000,
                                                    32000, 0, 16))
    bad = mono[:200]
    bad[100] = float("nan")
    seeds["nan.wav"] = wav(1, 16000, 32, floats(bad, 32), tag=3)
    big = mono[:200]
    big[50] = 1e30
    seeds["huge_float.wav"] = wav(1, 16000, 32, floats(big, 32), tag=3)
    seeds["mono.aiff"] = aiff(1, 16000, mono[:600])
    seeds["stereo.aifc"] = aiff(2, 22050, ramp(300, 2, 22050), aifc=True)

    for name, b in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b)

    # Other containers and codecs through sox, from the 16-bit seeds.
    src = os.path.join(OUT, "s16_mono_16k.wav")
    src2 = os.path.join(OUT, "s16_stereo_44k.wav")
    conversions = [
        ("mono.flac", src, []), ("stereo.flac", src2, []),
        ("mono.ogg", src, ["-C", "-1"]), ("mono.au", src, []),
        ("mono.caf", src, []), ("mono.w64", src, []),
        ("ima_adpcm.wav", src, ["-e", "ima-adpcm"]),
        ("ms_adpcm.wav", src, ["-e", "ms-adpcm"]),
        ("gsm.wav", src, ["-r", "8000", "-e", "gsm-full-rate"]),
        ("mulaw.wav", src, ["-e", "mu-law"]),
        ("alaw.wav", src, ["-e", "a-law"]),
        ("mono.sf", src, []), ("mono.nist", src, []),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, inp, opts in conversions:
            out = os.path.join(tmp, name)
            p = subprocess.run(["sox", "-D", inp] + opts + [out],
                               capture_output=True, text=True)
            if p.returncode != 0:
                print("sox failed for %s: %s" % (name, p.stderr.strip()),
                      file=sys.stderr)
                continue
            shutil.copy(out, os.path.join(OUT, name))
    names = sorted(os.listdir(OUT))
    for n in names:
        size = os.path.getsize(os.path.join(OUT, n))
        assert size <= 8192, (n, size)
    print("%d seeds in %s" % (len(names), OUT))


if __name__ == "__main__":
    main()
