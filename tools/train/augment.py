"""The conditions a microphone meets, applied to 16 kHz speech in PyTorch
(on whichever device the tensors live), and Kaldi fbank for a whole batch.

* rooms: impulse responses of shoebox rooms by the image-source method
  (early reflections: delays rounded to the sample, wall losses) joined to a diffuse
  tail of exponentially decaying noise whose decay time is the room's RT60
  (shorter at high frequencies); make_rir draws the room, the positions of
  talker and microphone and the RT60;
* babble: 1 to 4 other utterances summed, at 0 to 20 dB SNR;
* noise: white, pink or brown, at 0 to 30 dB SNR;
* telephone: a 200-400 Hz to 3-3.6 kHz band, 8 kHz sampling, then mu-law,
  A-law or 8-bit linear quantization (GSM 06.10 comes from sox, in
  engines.gsm_channel);
* microphone coloration: a random smooth gain curve of +-8 dB over
  frequency;
* level (-45 to -10 dBFS), DC offset, clipping, and leading and trailing
  stretches of silence or noise (so that blanks and endpoints are learned;
  a third of the utterances start within 50 ms);
  half of the utterances without noise keep exact digital silence, as a
  synthesizer's output and a muted microphone have (a model that never
  heard it read loud clean speech as nothing).
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

RATE = 16000
SPEED_OF_SOUND = 343.0


# ---------------------------------------------------------------------------
# Rooms
# ---------------------------------------------------------------------------

def make_rir(rng, rt60=None, early_s=0.08, rate=RATE):
    """One room impulse response (float32 numpy, peak-normalized at the
    direct path) and its RT60. Image sources up to `early_s` after the
    direct sound; after that a noise tail decaying 60 dB in RT60 seconds, in
    four bands whose RT60s fall with frequency, scaled to continue the
    energy of the early part."""
    room = np.array([rng.uniform(3, 10), rng.uniform(3, 8), rng.uniform(2.4, 4)])
    rt60 = float(rng.uniform(0.2, 0.9)) if rt60 is None else float(rt60)
    vol = room.prod()
    area = 2 * (room[0] * room[1] + room[0] * room[2] + room[1] * room[2])
    alpha = min(0.161 * vol / (area * rt60), 0.99)  # Sabine
    beta = math.sqrt(1 - alpha)
    margin = 0.5
    src = np.array([rng.uniform(margin, d - margin) for d in room])
    mic = np.array([rng.uniform(margin, d - margin) for d in room])
    length = int(min(1.2 * rt60 + 0.05, 1.0) * rate)
    h = np.zeros(length)
    reach = SPEED_OF_SOUND * (early_s + np.linalg.norm(src - mic) / SPEED_OF_SOUND)
    n = [int(math.ceil(reach / d)) + 1 for d in room]
    grids = np.meshgrid(*[np.arange(-k, k + 1) for k in n], indexing="ij")
    pos = np.zeros(grids[0].shape + (3,))
    direct = np.linalg.norm(src - mic)
    for parity in range(8):
        p = [(parity >> a) & 1 for a in range(3)]
        n_refl = np.zeros(grids[0].shape)
        for a in range(3):
            # Allen & Berkley: image at (1 - 2p) s + 2 q L, after
            # |q - p| + |q| reflections off the two walls of that axis.
            pos[..., a] = (1 - 2 * p[a]) * src[a] + 2 * grids[a] * room[a]
            n_refl += np.abs(grids[a] - p[a]) + np.abs(grids[a])
        dist = np.linalg.norm(pos - mic, axis=-1)
        keep = dist <= reach
        delay = np.round(dist[keep] / SPEED_OF_SOUND * rate).astype(int)
        amp = beta ** n_refl[keep] / np.maximum(dist[keep], 0.1)
        ok = delay < length
        np.add.at(h, delay[ok], amp[ok])
    t0 = int(round(direct / SPEED_OF_SOUND * rate))
    te = t0 + int(early_s * rate)
    if te < length:
        early_energy = np.sum(h[max(te - int(0.01 * rate), 0):te] ** 2) / max(int(0.01 * rate), 1)
        t = np.arange(length - te) / rate
        tail = np.zeros(length - te)
        spec_len = length - te
        for lo, hi, scale in ((0, 500, 1.1), (500, 1500, 1.0), (1500, 4000, 0.8),
                              (4000, 8000, 0.6)):
            noise = rng.standard_normal(spec_len)
            s = np.fft.rfft(noise)
            f = np.fft.rfftfreq(spec_len, 1.0 / rate)
            s[(f < lo) | (f >= hi)] = 0
            band = np.fft.irfft(s, spec_len)
            tail += band * np.exp(-6.908 * t / (rt60 * scale))
        level = np.sqrt(max(early_energy, 1e-12) / max(np.mean(tail[:int(0.01 * rate)] ** 2), 1e-12))
        h[te:] += tail * level
    h /= max(np.abs(h[:t0 + 8]).max(), 1e-9)
    return h.astype(np.float32), rt60


def convolve(x, h):
    """Full convolution of x [N] with h [L] by FFT, trimmed to N + L/4."""
    n = x.shape[-1] + h.shape[-1]
    nfft = 1 << (n - 1).bit_length()
    y = torch.fft.irfft(torch.fft.rfft(x, nfft) * torch.fft.rfft(h, nfft), nfft)
    return y[: x.shape[-1] + h.shape[-1] // 4]


# ---------------------------------------------------------------------------
# Noise, babble, channels
# ---------------------------------------------------------------------------

def colored_noise(n, kind, gen, device):
    w = torch.randn(n, generator=gen, device=device)
    if kind != "white":
        s = torch.fft.rfft(w)
        f = torch.arange(s.shape[0], device=device, dtype=torch.float32).clamp(min=1)
        s = s / (f.sqrt() if kind == "pink" else f)
        s[0] = 0
        w = torch.fft.irfft(s, n)
    return w / w.pow(2).mean().sqrt().clamp(min=1e-12)


def power(x):
    return x.pow(2).mean().clamp(min=1e-12)


def mix_at_snr(x, other, snr_db):
    """x + other scaled so that power(x) / power(other) is snr_db."""
    return x + other * (power(x) / power(other) / 10 ** (snr_db / 10)).sqrt()


def babble(others, n, rng, device):
    """Sum of the given utterances, each at a random offset and a random
    level within 6 dB, tiled to n samples."""
    out = torch.zeros(n, device=device)
    for o in others:
        o = o / power(o).sqrt()
        reps = -(-n // o.shape[0]) + 1
        tiled = o.repeat(reps)
        start = int(rng.integers(0, o.shape[0]))
        out += tiled[start:start + n] * 10 ** (rng.uniform(-3, 3) / 20)
    return out


def band_mask(n, lo, hi, device):
    f = torch.fft.rfftfreq(n, 1.0 / RATE).to(device)
    return ((f >= lo) & (f <= hi)).float()


def bandpass(x, lo, hi):
    n = x.shape[0]
    return torch.fft.irfft(torch.fft.rfft(x) * band_mask(n, lo, hi, x.device), n)


def mu_law(x, mu=255.0):
    y = torch.sign(x) * torch.log1p(mu * x.abs().clamp(max=1)) / math.log1p(mu)
    y = torch.round((y + 1) / 2 * mu) / mu * 2 - 1
    return torch.sign(y) * ((1 + mu) ** y.abs() - 1) / mu


def a_law(x, a=87.6):
    ax = x.abs().clamp(max=1)
    y = torch.where(ax < 1 / a, a * ax / (1 + math.log(a)),
                    (1 + torch.log((a * ax).clamp(min=1e-12))) / (1 + math.log(a)))
    y = torch.round(y * 127) / 127
    lin = torch.where(y < 1 / (1 + math.log(a)), y * (1 + math.log(a)) / a,
                      torch.exp(y * (1 + math.log(a)) - 1) / a)
    return torch.sign(x) * lin


def resample(x, src, dst):
    """x [N] from rate src to dst by the DFT (band-limited; the spectrum is
    cut or zero-extended), N * dst / src samples."""
    n = x.shape[0]
    m = int(round(n * dst / src))
    s = torch.fft.rfft(x)
    keep = min(s.shape[0], m // 2 + 1)
    out = torch.zeros(m // 2 + 1, dtype=s.dtype, device=x.device)
    out[:keep] = s[:keep]
    return torch.fft.irfft(out, m) * (m / n)


def telephone(x, rng, codec=None):
    """Band-limited, 8 kHz, companded (mu-law, A-law) or 8-bit; back at 16 kHz."""
    x = bandpass(x, rng.uniform(200, 400), rng.uniform(3000, 3600))
    y = resample(x, RATE, 8000)
    peak = y.abs().max().clamp(min=1e-9)
    y = y / peak * 0.7
    codec = codec or ["mulaw", "alaw", "linear8"][rng.integers(3)]
    if codec == "mulaw":
        y = mu_law(y)
    elif codec == "alaw":
        y = a_law(y)
    else:
        y = torch.round(y * 127) / 127
    return resample(y * peak / 0.7, 8000, RATE)[: x.shape[0]]


def coloration(x, rng, depth_db=8.0):
    """A random smooth gain curve over frequency (a microphone, a small
    loudspeaker, a cheap preamp)."""
    n = x.shape[0]
    s = torch.fft.rfft(x)
    points = torch.tensor(rng.uniform(-depth_db, depth_db, 8), dtype=torch.float32,
                          device=x.device)
    curve = F.interpolate(points[None, None], size=s.shape[0], mode="linear",
                          align_corners=True)[0, 0]
    return torch.fft.irfft(s * 10 ** (curve / 20), n)


# ---------------------------------------------------------------------------
# The whole chain
# ---------------------------------------------------------------------------

DEFAULT_PROBS = dict(reverb=0.25, color=0.25, babble=0.2, noise=0.3, telephone=0.12,
                     floor=0.5, dc=0.15, clip=0.04, noise_only=0.03, no_lead=0.33)


def augment(x, rng, gen, rir, pool_sample, probs=DEFAULT_PROBS):
    """One utterance through a random chain of conditions. x: float32 [N]
    on the device; rir() gives a room impulse response tensor (called only
    when the chain has a room); pool_sample(k) gives k other
    utterances (for babble). Returns (y, keep_label): keep_label is False
    when the utterance was replaced by noise only (its target is empty)."""
    device = x.device
    keep = True
    if rng.random() < probs["noise_only"]:
        keep = False
        x = colored_noise(x.shape[0], ["white", "pink", "brown"][rng.integers(3)], gen,
                          device) * 0.01
    if keep and rng.random() < probs["reverb"]:
        x = convolve(x, rir())
    if keep and rng.random() < probs["color"]:
        x = coloration(x, rng)
    # Leading and trailing stretches, filled by the noise below. A third of
    # the utterances start within 50 ms (a stream can open mid-speech, and
    # a recording with the talker already speaking); a model that always
    # heard silence first drops the first words of such a stream.
    lead = rng.uniform(0.0, 0.05) if rng.random() < probs["no_lead"] else rng.uniform(0.05, 1.0)
    pad = (int(lead * RATE), int(rng.uniform(0.05, 0.8) * RATE))
    speech_power = power(x)
    x = F.pad(x, pad)
    if keep and rng.random() < probs["babble"]:
        others = pool_sample(int(rng.integers(1, 5)))
        b = babble(others, x.shape[0], rng, device)
        x = x + b * (speech_power / power(b) / 10 ** (rng.uniform(0, 20) / 10)).sqrt()
    if rng.random() < probs["noise"]:
        kind = ["white", "pink", "brown"][rng.integers(3)]
        nz = colored_noise(x.shape[0], kind, gen, device)
        x = x + nz * (speech_power / 10 ** (rng.uniform(0, 30) / 10)).sqrt()
    elif rng.random() < probs["floor"]:
        # A quiet floor, as most real inputs have (60-90 dB below the
        # speech); the others keep the synthesizer's digital silence.
        nz = torch.randn(x.shape[0], generator=gen, device=device)
        x = x + nz * (speech_power / 10 ** (rng.uniform(6, 9))).sqrt()
    if rng.random() < probs["telephone"]:
        x = telephone(x, rng)
    level = 10 ** (rng.uniform(-45, -10) / 20)
    x = x * (level / power(x).sqrt())
    if rng.random() < probs["dc"]:
        x = x + rng.uniform(-0.02, 0.02)
    if rng.random() < probs["clip"]:
        x = x * (10 ** (rng.uniform(-12, -3) / 20) / power(x).sqrt())
    x = x.clamp(-1.0, 32767 / 32768)
    return torch.round(x * 32768) / 32768, keep


# ---------------------------------------------------------------------------
# Kaldi fbank, batched
# ---------------------------------------------------------------------------

def mel_banks(n_bins, nfft, rate, low, high):
    """Kaldi's triangular mel filters, [n_bins, nfft / 2 + 1] (the Nyquist
    bin gets no weight, as in Kaldi)."""
    def mel(f):
        return 1127.0 * np.log1p(np.asarray(f, dtype=np.float64) / 700.0)
    lo, hi = mel(low), mel(high)
    delta = (hi - lo) / (n_bins + 1)
    f = mel(np.arange(nfft // 2) * rate / nfft)
    out = np.zeros((n_bins, nfft // 2 + 1))
    for b in range(n_bins):
        left, center, right = lo + b * delta, lo + (b + 1) * delta, lo + (b + 2) * delta
        up = (f - left) / (center - left)
        down = (right - f) / (right - center)
        out[b, :nfft // 2] = np.maximum(0.0, np.minimum(up, down))
    return torch.from_numpy(out.astype(np.float32))


class Fbank:
    """torchaudio.compliance.kaldi.fbank with the model's frontend options
    (aural_ref.FRONTEND_DEFAULTS: 25 ms povey window, 10 ms shift, no dither,
    pre-emphasis 0.97, DC removed, 512-point FFT, power, 80 log-mel bins
    from 20 Hz, snip_edges) for a padded batch at once."""

    def __init__(self, device, num_mel_bins=80, rate=RATE):
        self.win, self.shift, self.nfft = int(0.025 * rate), int(0.010 * rate), 512
        self.mel = mel_banks(num_mel_bins, self.nfft, rate, 20.0, rate / 2).to(device)
        n = torch.arange(self.win, dtype=torch.float64)
        self.window = ((0.5 - 0.5 * torch.cos(2 * math.pi * n / (self.win - 1))) ** 0.85
                       ).float().to(device)

    def frames(self, n_samples):
        return 0 if n_samples < self.win else 1 + (n_samples - self.win) // self.shift

    def __call__(self, x):
        """x [B, N] samples in [-1, 1] -> [B, T, bins] (T for length N)."""
        fr = (x * 32768.0).unfold(1, self.win, self.shift)  # [B, T, win]
        fr = fr - fr.mean(-1, keepdim=True)
        prev = torch.cat((fr[..., :1], fr[..., :-1]), -1)
        fr = (fr - 0.97 * prev) * self.window
        spec = torch.fft.rfft(fr, self.nfft).abs().pow(2)
        mel = torch.matmul(spec, self.mel.t())
        return mel.clamp(min=torch.finfo(torch.float32).eps).log()
