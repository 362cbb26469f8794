/* Controls of the fake PortAudio (fake_portaudio.c). */
#ifndef AURAL_TESTS_FAKE_PORTAUDIO_H
#define AURAL_TESTS_FAKE_PORTAUDIO_H

#include <stdatomic.h>

extern _Atomic int fake_pa_hold;        /* Pa_AbortStream waits while set */
extern _Atomic int fake_pa_active;      /* what Pa_IsStreamActive says */
extern _Atomic long fake_pa_callbacks;  /* callbacks so far */
extern _Atomic int fake_pa_open_streams;
extern _Atomic int fake_pa_open_fails;  /* Pa_OpenStream fails while set */
extern _Atomic int fake_pa_start_fails; /* Pa_StartStream fails while set */
extern _Atomic int fake_pa_initialized; /* Pa_Initialize less Pa_Terminate */
extern _Atomic int fake_pa_inits;       /* Pa_Initialize calls so far */

#endif
