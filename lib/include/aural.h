/*
 * aural.h — libaural, the computation behind aurald and aural.
 *
 *   #include <aural.h>
 *
 *   aural_err err;
 *   aural_audiofile *af;
 *   if (aural_audiofile_open("speech.flac", &af, &err) < 0) die(err.msg);
 *   aural_audiofile_info info;
 *   aural_audiofile_get_info(af, &info);
 *
 *   aural_frontend_config cfg;
 *   aural_frontend_config_default(&cfg);     // 80 log-mel bins at 16 kHz
 *   cfg.input_rate_hz = info.rate_hz;
 *   cfg.n_channels = info.n_channels;
 *   aural_frontend *fe;
 *   if (aural_frontend_create(&cfg, &fe, &err) < 0) die(err.msg);
 *
 *   float pcm[4096];
 *   size_t n;
 *   while (aural_audiofile_read(af, pcm, 4096 / info.n_channels, &n, &err)
 *              == 0 && n > 0)
 *     aural_frontend_push(fe, pcm, n, on_frames, user);
 *   aural_frontend_finish(fe, on_frames, user);
 *
 * aural/stream.h puts frontend, encoder, chunking and CTC text together:
 * one aural_stream per audio source is the usual way in.
 *
 * The library computes on caller buffers: no threads, sockets or global
 * mutable state of its own. Objects are not thread-safe; use one per
 * thread or stream.
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
