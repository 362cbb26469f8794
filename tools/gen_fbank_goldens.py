#!/usr/bin/python3
"""Generate golden test data for the C Kaldi-compatible fbank front end.

For every test case NAME this script writes into the output directory
(default ``tests/data/fbank``):

  NAME.wav   the input audio file (16-bit PCM via the ``wave`` module, except
             the ``float32`` case, which is a hand-written IEEE-float WAV)
  NAME.npy   golden log-mel features: float32 ('<f4'), C order, shape
             [n_frames, 80], numpy .npy format v1.0; shape (0, 80) when the
             (resampled) signal has fewer than 400 samples
  cases.txt  one line per case: ``NAME RATE_HZ CHANNELS N_FRAMES``

Golden definition (must match the C implementation):
  1. Read the WAV back from disk.  int16 samples -> float32 by dividing by
     32768; float WAV samples are used as they are.
  2. Downmix by summing the channels in channel order in float32, then
     dividing by float32(n_channels).
  3. If the rate is not 16000 Hz, resample to 16 kHz with libsoxr 0.1.3
     (the system ``libsoxr.so.0``) called through ctypes exactly as the C code
     calls it: soxr_create(in_rate, 16000.0, 1, ...) with
     io_spec = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I),
     q_spec = soxr_quality_spec(SOXR_HQ, 0), runtime = soxr_runtime_spec(1)
     with log2_large_dft_size = 10;
     input fed in blocks of max(1, in_rate // 100) samples, then flushed with
     soxr_process(s, NULL, 0, NULL, out, olen, &odone) until odone == 0.
  4. torchaudio.compliance.kaldi.fbank on x * 32768 with num_mel_bins=80,
     25 ms / 10 ms frames, dither=0, preemphasis 0.97, remove_dc_offset,
     povey window, round_to_power_of_two, snip_edges, low_freq=20,
     high_freq=0, use_power, use_log_fbank, no energy, 16 kHz, computed
     in float64 and stored as float32.  float64 because the float32 path is
     itself up to ~3e-3 away from the exact result in ill-conditioned bins
     (the -95 dB leakage bins of a pure tone, the empty top band of
     upsampled 8 kHz audio), where FFT rounding dominates; a float32 golden
     could not tell a 2e-3 discrepancy from torch's own rounding.  The C
     code computes each frame in double precision for the same reason.
     For fewer than 400 samples torchaudio raises an AssertionError
     ("choose a window size 400 that is [2, n]"), so an empty (0, 80) array
     is written instead.

The goldens are always computed from the WAV files as written (read back
from disk), so they are consistent with the committed audio even if the
synthesis step changes.  Speech comes from espeak-ng (deterministic for a
given espeak-ng version; generated with eSpeak NG 1.51), noise from a fixed
numpy seed.  All rate conversions used to *create* inputs also go through
libsoxr (no dither), so sox is not needed.

Rerun (from the repository root) with:

    /usr/bin/python3 tools/gen_fbank_goldens.py [--out DIR]

Requires torch + torchaudio (tested with torch 1.13 / torchaudio 0.13.1),
numpy, espeak-ng and libsoxr0.
"""

import argparse
import ctypes
import os
import struct
import subprocess
import sys
import tempfile
import wave

import numpy as np
import torch
import torchaudio
import torchaudio.compliance.kaldi as kaldi

TARGET_RATE = 16000
NUM_MEL_BINS = 80
FRAME_LEN = 400    # 25 ms at 16 kHz
FRAME_SHIFT = 160  # 10 ms at 16 kHz

# Speech used by every speech-derived case.  At -s 190 espeak-ng produces
# ~1.32 s at 22050 Hz with the voiced part ending at ~1.06 s; we keep the
# first SPEECH_SECONDS to keep the committed data small.
SPEECH_TEXT = "Check the fresh zebra."
SPEECH_VOICE = "en-us"
SPEECH_SPEED = 190
SPEECH_SECONDS = 1.1
NOISE_SEED = 20240601
NOISE_SNR_DB = 10.0


# --------------------------------------------------------------------------
# libsoxr through ctypes (structures transcribed from /usr/include/soxr.h)
# --------------------------------------------------------------------------

SOXR_FLOAT32_I = 0
SOXR_HQ = 4  # == SOXR_20_BITQ


class SoxrIoSpec(ctypes.Structure):
    _fields_ = [("itype", ctypes.c_int),        # soxr_datatype_t (enum)
                ("otype", ctypes.c_int),
                ("scale", ctypes.c_double),
                ("e", ctypes.c_void_p),
                ("flags", ctypes.c_ulong)]


class SoxrQualitySpec(ctypes.Structure):
    _fields_ = [("precision", ctypes.c_double),
                ("phase_response", ctypes.c_double),
                ("passband_end", ctypes.c_double),
                ("stopband_begin", ctypes.c_double),
                ("e", ctypes.c_void_p),
                ("flags", ctypes.c_ulong)]


class SoxrRuntimeSpec(ctypes.Structure):
    _fields_ = [("log2_min_dft_size", ctypes.c_uint),
                ("log2_large_dft_size", ctypes.c_uint),
                ("coef_size_kbytes", ctypes.c_uint),
                ("num_threads", ctypes.c_uint),
                ("e", ctypes.c_void_p),
                ("flags", ctypes.c_ulong)]


def _load_soxr():
    lib = ctypes.CDLL("/usr/lib/x86_64-linux-gnu/libsoxr.so.0")
    lib.soxr_version.restype = ctypes.c_char_p
    lib.soxr_version.argtypes = []
    # The three spec constructors return structs by value.
    lib.soxr_io_spec.restype = SoxrIoSpec
    lib.soxr_io_spec.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.soxr_quality_spec.restype = SoxrQualitySpec
    lib.soxr_quality_spec.argtypes = [ctypes.c_ulong, ctypes.c_ulong]
    lib.soxr_runtime_spec.restype = SoxrRuntimeSpec
    lib.soxr_runtime_spec.argtypes = [ctypes.c_uint]
    lib.soxr_create.restype = ctypes.c_void_p
    lib.soxr_create.argtypes = [ctypes.c_double, ctypes.c_double, ctypes.c_uint,
                                ctypes.POINTER(ctypes.c_char_p),
                                ctypes.POINTER(SoxrIoSpec),
                                ctypes.POINTER(SoxrQualitySpec),
                                ctypes.POINTER(SoxrRuntimeSpec)]
    lib.soxr_process.restype = ctypes.c_char_p  # soxr_error_t, NULL = ok
    lib.soxr_process.argtypes = [ctypes.c_void_p,
                                 ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_size_t),
                                 ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_size_t)]
    lib.soxr_delete.restype = None
    lib.soxr_delete.argtypes = [ctypes.c_void_p]
    return lib


_SOXR = _load_soxr()


# The C resampler's soxr runtime setting (lib/resampler.c).
C_LARGE_DFT = 10


def soxr_resample(x, in_rate, out_rate=TARGET_RATE, large_dft=None):
    """Resample mono float32 `x` from in_rate to out_rate with libsoxr.

    Mirrors the C code: HQ quality, float32 interleaved I/O, 1 thread,
    input fed in blocks of max(1, in_rate // 100) samples, then flushed.
    large_dft sets the runtime's log2_large_dft_size (the C code's 10);
    None keeps soxr's default, with which the test inputs were made.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    err = ctypes.c_char_p()
    io_spec = _SOXR.soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I)
    q_spec = _SOXR.soxr_quality_spec(SOXR_HQ, 0)
    rt_spec = _SOXR.soxr_runtime_spec(1)
    if large_dft is not None:
        rt_spec.log2_large_dft_size = large_dft
    s = _SOXR.soxr_create(float(in_rate), float(out_rate), 1, ctypes.byref(err),
                          ctypes.byref(io_spec), ctypes.byref(q_spec),
                          ctypes.byref(rt_spec))
    if not s or err.value:
        raise RuntimeError("soxr_create failed: %r" % err.value)
    try:
        block = max(1, int(in_rate) // 100)
        # Generous output buffer: far more than one block can ever produce.
        olen = 4 * (block * int(out_rate) // int(in_rate) + 1) + 8192
        out = np.empty(olen, dtype=np.float32)
        out_ptr = out.ctypes.data_as(ctypes.c_void_p)
        idone = ctypes.c_size_t(0)
        odone = ctypes.c_size_t(0)
        pieces = []
        base = x.ctypes.data
        for start in range(0, len(x), block):
            blen = min(block, len(x) - start)
            used = 0
            stalls = 0
            while used < blen:  # loop until this block is fully consumed
                e = _SOXR.soxr_process(s, ctypes.c_void_p(base + 4 * (start + used)),
                                       blen - used, ctypes.byref(idone),
                                       out_ptr, olen, ctypes.byref(odone))
                if e:
                    raise RuntimeError("soxr_process failed: %r" % e)
                used += idone.value
                if odone.value:
                    pieces.append(out[:odone.value].copy())
                stalls = stalls + 1 if (idone.value == 0 and odone.value == 0) else 0
                if stalls > 100:
                    raise RuntimeError("soxr_process made no progress")
        # Flush: in = NULL signals end of input; repeat until nothing comes out.
        while True:
            e = _SOXR.soxr_process(s, None, 0, None, out_ptr, olen, ctypes.byref(odone))
            if e:
                raise RuntimeError("soxr_process (flush) failed: %r" % e)
            if odone.value == 0:
                break
            pieces.append(out[:odone.value].copy())
    finally:
        _SOXR.soxr_delete(s)
    if not pieces:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(pieces).astype(np.float32, copy=False)


# --------------------------------------------------------------------------
# WAV writing / reading
# --------------------------------------------------------------------------

def float_to_int16(x):
    """Quantize float audio in [-1, 1) to int16 (round, clip, no dither)."""
    return np.clip(np.round(np.asarray(x, dtype=np.float64) * 32768.0),
                   -32768, 32767).astype(np.int16)


def write_wav_int16(path, data, rate):
    """data: int16 array [n] (mono) or [n, channels] (interleaved on write)."""
    data = np.asarray(data, dtype=np.int16)
    if data.ndim == 1:
        data = data[:, None]
    with wave.open(path, "wb") as w:
        w.setnchannels(data.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.ascontiguousarray(data, dtype="<i2").tobytes())


def write_wav_float32(path, data, rate):
    """Write a mono/multichannel 32-bit IEEE float WAV by hand.

    Layout: RIFF/WAVE, 18-byte 'fmt ' chunk (WAVE_FORMAT_IEEE_FLOAT = 3,
    cbSize = 0), a 'fact' chunk (sample frames per channel, as the spec asks
    for non-PCM formats), then 'data'.  This is what sox/libsndfile-style
    writers emit, and exercises chunk skipping in the C reader.
    """
    data = np.asarray(data, dtype=np.float32)
    if data.ndim == 1:
        data = data[:, None]
    n, ch = data.shape
    payload = np.ascontiguousarray(data, dtype="<f4").tobytes()
    fmt = struct.pack("<HHIIHHH", 3, ch, rate, rate * ch * 4, ch * 4, 32, 0)
    fact = struct.pack("<I", n)
    body = (b"WAVE"
            + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"fact" + struct.pack("<I", len(fact)) + fact
            + b"data" + struct.pack("<I", len(payload)) + payload)
    if len(payload) % 2:
        body += b"\0"  # RIFF chunks are word aligned (never hit for f32)
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(body)) + body)


def read_wav(path):
    """Read a WAV written by this script -> (float32 [n, ch], rate, ch).

    int16 PCM is scaled by 1/32768; IEEE float samples are returned as is.
    """
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:4] == b"RIFF" and raw[8:12] == b"WAVE", path
    pos, fmt, data = 12, None, None
    while pos + 8 <= len(raw):
        cid, size = raw[pos:pos + 4], struct.unpack("<I", raw[pos + 4:pos + 8])[0]
        body = raw[pos + 8:pos + 8 + size]
        if cid == b"fmt ":
            fmt = struct.unpack("<HHIIHH", body[:16])
        elif cid == b"data":
            data = body
        pos += 8 + size + (size & 1)
    tag, ch, rate, _, _, bits = fmt
    if tag == 1 and bits == 16:
        x = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768)
    elif tag == 3 and bits == 32:
        x = np.frombuffer(data, dtype="<f4").astype(np.float32)
    else:
        raise ValueError("unsupported WAV format %r in %s" % (fmt, path))
    return x.reshape(-1, ch), rate, ch


# --------------------------------------------------------------------------
# Golden features
# --------------------------------------------------------------------------

def downmix(x):
    """[n, ch] float32 -> [n] float32: sum in channel order, divide by ch."""
    acc = x[:, 0].copy()
    for c in range(1, x.shape[1]):
        acc = (acc + x[:, c]).astype(np.float32)
    return (acc / np.float32(x.shape[1])).astype(np.float32)


def fbank_golden(x16k):
    """Kaldi fbank of a 16 kHz float32 signal in [-1, 1] -> float32 [n, 80]."""
    if len(x16k) < FRAME_LEN:
        # torchaudio asserts for n < window size; the C code returns 0 frames.
        return np.zeros((0, NUM_MEL_BINS), dtype=np.float32)
    # float64 on purpose: see the module docstring (step 4).
    wav = torch.from_numpy(x16k.astype(np.float64) * 32768.0).unsqueeze(0)
    feats = kaldi.fbank(wav, num_mel_bins=NUM_MEL_BINS, frame_length=25,
                        frame_shift=10, dither=0.0, preemphasis_coefficient=0.97,
                        remove_dc_offset=True, window_type="povey",
                        round_to_power_of_two=True, snip_edges=True,
                        low_freq=20, high_freq=0, use_power=True,
                        use_log_fbank=True, use_energy=False,
                        sample_frequency=TARGET_RATE)
    return np.ascontiguousarray(feats.numpy(), dtype="<f4")


def golden_from_wav(path):
    """Full golden pipeline from a WAV file on disk. Returns (feats, info)."""
    x, rate, ch = read_wav(path)
    mono = downmix(x)
    info = {"rate": rate, "channels": ch, "n_in": len(mono)}
    if rate != TARGET_RATE:
        mono = soxr_resample(mono, rate, TARGET_RATE, large_dft=C_LARGE_DFT)
        info["n_out"] = len(mono)
    info["n16k"] = len(mono)
    return fbank_golden(mono), info


# --------------------------------------------------------------------------
# Input synthesis
# --------------------------------------------------------------------------

def espeak_speech():
    """espeak-ng speech at its native 22050 Hz, int16, first SPEECH_SECONDS."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_wav = os.path.join(tmp, "espeak.wav")
        subprocess.run(["espeak-ng", "-v", SPEECH_VOICE, "-s", str(SPEECH_SPEED),
                        "-w", tmp_wav, SPEECH_TEXT], check=True)
        with wave.open(tmp_wav, "rb") as w:
            assert w.getnchannels() == 1 and w.getsampwidth() == 2
            rate = w.getframerate()
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    assert rate == 22050, rate
    return pcm[:int(round(SPEECH_SECONDS * rate))].copy(), rate


def build_cases():
    """Return list of (name, writer, data, rate) in a fixed order."""
    sp22_i16, r22 = espeak_speech()
    sp22 = sp22_i16.astype(np.float32) / np.float32(32768)

    # 16 kHz speech: soxr-resampled float (also used unquantized for float32).
    sp16_f = np.clip(soxr_resample(sp22, r22, 16000), -1.0, 1.0).astype(np.float32)
    sp16 = float_to_int16(sp16_f)

    cases = []
    cases.append(("speech", "i16", sp16, 16000))

    # Speech + seeded white noise at NOISE_SNR_DB (power over whole clip).
    rng = np.random.default_rng(NOISE_SEED)
    s = sp16.astype(np.float64)
    p_sig = np.mean(s ** 2)
    noise = rng.standard_normal(len(s)) * np.sqrt(p_sig / 10 ** (NOISE_SNR_DB / 10))
    noisy = np.clip(np.round(s + noise), -32768, 32767).astype(np.int16)
    cases.append(("speech_noise", "i16", noisy, 16000))

    t = np.arange(16000, dtype=np.float64) / 16000.0
    tone = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.3 * np.sin(2 * np.pi * 3000 * t)
    cases.append(("tone", "i16", float_to_int16(tone), 16000))

    cases.append(("silence", "i16", np.zeros(16000, dtype=np.int16), 16000))

    clipped = np.clip(sp16.astype(np.int32) * 8, -32768, 32767).astype(np.int16)
    cases.append(("clipped", "i16", clipped, 16000))

    # Short excerpts taken from a voiced region of the speech.
    off = 6000
    cases.append(("short", "i16", sp16[off:off + 300].copy(), 16000))
    cases.append(("one_frame", "i16", sp16[off:off + 400].copy(), 16000))
    cases.append(("edge559", "i16", sp16[off:off + 559].copy(), 16000))
    cases.append(("edge560", "i16", sp16[off:off + 560].copy(), 16000))

    # 44.1 kHz stereo: L = speech, R = 0.5 * speech delayed by 3 ms.
    sp44 = soxr_resample(sp22, r22, 44100)
    delay = int(round(0.003 * 44100))  # 132 samples
    right = np.zeros_like(sp44)
    right[delay:] = 0.5 * sp44[:len(sp44) - delay]
    stereo = np.stack([float_to_int16(sp44), float_to_int16(right)], axis=1)
    cases.append(("stereo44k", "i16", stereo, 44100))

    cases.append(("mono22k", "i16", sp22_i16, 22050))

    sp8 = float_to_int16(soxr_resample(sp22, r22, 8000))
    cases.append(("mono8k", "i16", sp8, 8000))

    cases.append(("float32", "f32", sp16_f, 16000))
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/fbank",
                    help="output directory (default: tests/data/fbank)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)

    print("torch %s, torchaudio %s, numpy %s, %s" % (
        torch.__version__, torchaudio.__version__, np.__version__,
        _SOXR.soxr_version().decode()))

    lines = []
    for name, kind, data, rate in build_cases():
        wav_path = os.path.join(args.out, name + ".wav")
        if kind == "i16":
            write_wav_int16(wav_path, data, rate)
        else:
            write_wav_float32(wav_path, data, rate)

        feats, info = golden_from_wav(wav_path)
        n = info["n16k"]
        expect = 0 if n < FRAME_LEN else 1 + (n - FRAME_LEN) // FRAME_SHIFT
        assert feats.shape == (expect, NUM_MEL_BINS), (name, feats.shape, expect)
        assert np.all(np.isfinite(feats)), name
        np.save(os.path.join(args.out, name + ".npy"), feats)

        lines.append("%s %d %d %d" % (name, rate, info["channels"], feats.shape[0]))
        msg = "%-13s %5d Hz x%d  %6d samples" % (name, rate, info["channels"], info["n_in"])
        if "n_out" in info:
            msg += " -> soxr -> %6d samples @16k" % info["n_out"]
        msg += "  -> %3d frames" % feats.shape[0]
        if feats.shape[0]:
            msg += "  (min %.3f max %.3f)" % (feats.min(), feats.max())
        print(msg)

    with open(os.path.join(args.out, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d cases to %s" % (len(lines), args.out))


if __name__ == "__main__":
    sys.exit(main())
