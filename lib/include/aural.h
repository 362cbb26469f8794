/*
 * aural.h — libaural, the computation behind aurald and aural.
 *
 * The main use: a model, one stream per audio source, chunks out. (This
 * example is compiled by the tests, tests/check_header_example.py.)
 *
 *   #include <aural.h>
 *
 *   aural_err err;
 *   aural_model *model;
 *   if (aural_model_load("model.safetensors", NULL, &model, &err) < 0)
 *     return fprintf(stderr, "%s\n", err.msg), 1;
 *   aural_stream_config sc;
 *   aural_stream_config_default(&sc);          // 50-frame (500 ms) chunks
 *   sc.input_rate_hz = 44100;                  // the audio's rate ...
 *   sc.n_channels = 1;                         // ... and channels
 *   sc.outputs = AURAL_STREAM_EMBEDDINGS;      // (logits, text: CTC head)
 *   aural_stream *s;
 *   if (aural_stream_create(model, &sc, &s, &err) < 0)
 *     return fprintf(stderr, "%s\n", err.msg), 1;
 *   aural_stream_info info;
 *   aural_stream_get_info(s, &info);
 *   aural_chunk ch = {.max_frames = info.chunk_frames};
 *   ch.emb = malloc(info.chunk_frames * (size_t)info.d_model * sizeof(float));
 *
 *   static float pcm[4410];                    // 100 ms of float samples
 *   size_t n;
 *   do {
 *     n = fread(pcm, sizeof(float), 4410, stdin);
 *     if (n == 0) aural_stream_end(s);         // no more audio: flush
 *     size_t at = 0, taken = 0;
 *     do {
 *       if (at < n) aural_stream_push(s, pcm + at, n - at, &taken);
 *       at += taken;                           // a push takes what fits;
 *       aural_stream_compute(s);               // computing makes room
 *       while (aural_stream_pull(s, &ch) == 1) // whole chunks; the last
 *         printf("frames %llu..%llu%s\n",      // one is flagged final
 *                (unsigned long long)ch.first_frame,
 *                (unsigned long long)(ch.first_frame + ch.n_frames),
 *                ch.final ? " (final)" : "");
 *     } while (at < n);
 *   } while (n > 0);
 *   free(ch.emb);
 *   aural_stream_destroy(s);
 *   aural_model_free(model);
 *
 * aural/stream.h says more (several streams in one batched pass); the
 * parts a stream is made of have headers of their own: aural/frontend.h
 * (audio to log-mel), aural/encoder.h (the encoder state and batches),
 * aural/audiofile.h (reading files).
 *
 * The library computes on caller buffers and has no threads or sockets of
 * its own. Its only process-wide state is set once, on first use, and
 * guarded: the compute kernels chosen for this CPU (aural_isa_name(),
 * aural_gemm_name(); the environment variable AURAL_ISA may force a set,
 * and a set the CPU cannot run is refused with a line on stderr; so are
 * AVX512-BF16 dot products that disagree with their emulation, which
 * precision bf16 then uses: the library's only output), FFTW's planner,
 * made thread-safe, and libespeak-ng (custom words, aural/decoder.h),
 * whose every use is serialized. Opens of audio
 * files are serialized too: libsndfile says why an open failed in one
 * variable for the whole process (aural/audiofile.h). Objects are not
 * thread-safe; use one per thread or stream. A model is read-only once
 * loaded and may be shared by every stream and thread.
 */
#ifndef AURAL_H
#define AURAL_H

#include "aural/audiofile.h"
#include "aural/error.h"
#include "aural/fbank.h"
#include "aural/encoder.h"
#include "aural/frontend.h"
#include "aural/model.h"
#include "aural/resampler.h"
#include "aural/stream.h"

#define AURAL_VERSION "0.1.0"

#endif
