/*
 * The aural command-line tool, run as a real process ($AURAL_BIN).
 *
 * Bad inputs must end with exit status 1, one line on stderr naming the
 * input and the problem, no output file and no temporary file left in the
 * output directory; an existing output must survive untouched. Good inputs
 * must reproduce the torchaudio goldens in tests/data/fbank.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "helpers.h"
#include "wavgen.h"
#include "npy.h"

#define PATH_BYTES 4096
#define DIR_BYTES 1024
#define MAX_ARGS 16
#define TMP_PREFIX ".aural-encode-"

/* Largest difference allowed from the torchaudio features. */
#define GOLDEN_TOLERANCE 2e-3


typedef struct fixture {
  char *root;               /* this test's temporary directory */
  char in_dir[DIR_BYTES];   /* inputs */
  char out_dir[DIR_BYTES];  /* outputs only, so leftovers show */
  char *out, *err;          /* stdout and stderr of the last run */
  const char *stdout_to;    /* a file for the next runs' stdout instead */
  const char *stdin_from;   /* a file for the next runs' stdin, not
                               /dev/null */
  int stdout_closed;        /* the next runs start with fd 1 closed */
} fixture;

static const char *aural_bin(void) {
  const char *bin = getenv("AURAL_BIN");
  if (bin == NULL) fail_msg("AURAL_BIN is not set");
  return bin;
}

/* The whole file as a malloc'ed string. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t cap = 4096, len = 0;
  char *text = malloc(cap);
  assert_non_null(text);
  size_t n;
  while ((n = fread(text + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len - 1 == 0) {
      cap *= 2;
      text = realloc(text, cap);
      assert_non_null(text);
    }
  }
  fclose(f);
  text[len] = '\0';
  return text;
}

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000};
  nanosleep(&ts, NULL);
}

/* ---- Running the tool. ---- */

/* Starts $AURAL_BIN with args (NULL-terminated, without argv[0]); stdin
 * is /dev/null (or fx->stdin_from), stdout and stderr go to files in the
 * test's directory. */
static pid_t spawn_aural(fixture *fx, const char *const *args) {
  char *argv[MAX_ARGS + 2];
  argv[0] = (char *)aural_bin();
  size_t n = 0;
  for (; args[n] != NULL; n++) {
    assert_true(n < MAX_ARGS);
    argv[n + 1] = (char *)args[n];
  }
  argv[n + 1] = NULL;

  char out_path[PATH_BYTES], err_path[PATH_BYTES];
  snprintf(out_path, sizeof out_path, "%s/stdout.txt", fx->root);
  snprintf(err_path, sizeof err_path, "%s/stderr.txt", fx->root);
  posix_spawn_file_actions_t fa;
  assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
  int flags = O_WRONLY | O_CREAT | O_TRUNC;
  assert_int_equal(
      posix_spawn_file_actions_addopen(
          &fa, 0, fx->stdin_from ? fx->stdin_from : "/dev/null", O_RDONLY, 0),
      0);
  assert_int_equal(
      posix_spawn_file_actions_addopen(
          &fa, 1, fx->stdout_to ? fx->stdout_to : out_path, flags, 0600),
      0);
  if (fx->stdout_closed)
    assert_int_equal(posix_spawn_file_actions_addclose(&fa, 1), 0);
  assert_int_equal(
      posix_spawn_file_actions_addopen(&fa, 2, err_path, flags, 0600), 0);

  /* Whatever the test runner ignores, the tool starts with defaults. */
  posix_spawnattr_t attr;
  assert_int_equal(posix_spawnattr_init(&attr), 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  assert_int_equal(posix_spawnattr_setsigdefault(&attr, &defaults), 0);
  assert_int_equal(posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF), 0);

  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, environ);
  if (rc != 0) fail_msg("cannot run %s: %s", argv[0], strerror(rc));
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return pid;
}

/* Waits for pid, keeps its stdout and stderr in fx and returns its exit
 * status. Dying from a signal (a crash) fails the test. */
static int wait_aural(fixture *fx, pid_t pid) {
  int status;
  pid_t got;
  while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  assert_int_equal(got, pid);
  char path[PATH_BYTES];
  free(fx->out);
  free(fx->err);
  snprintf(path, sizeof path, "%s/stdout.txt", fx->root);
  fx->out = fx->stdout_to || fx->stdout_closed ? strdup("") : read_text(path);
  assert_non_null(fx->out);
  snprintf(path, sizeof path, "%s/stderr.txt", fx->root);
  fx->err = read_text(path);
  if (WIFSIGNALED(status))
    fail_msg("aural died from signal %d; stderr:\n%s", WTERMSIG(status),
             fx->err);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/* Runs aural with the NULL-terminated arguments and returns its exit
 * status; its output is then in fx->out and fx->err. */
static int run_aural(fixture *fx, ...) {
  const char *args[MAX_ARGS + 1];
  size_t n = 0;
  va_list ap;
  va_start(ap, fx);
  for (const char *a; (a = va_arg(ap, const char *)) != NULL;) {
    assert_true(n < MAX_ARGS);
    args[n++] = a;
  }
  va_end(ap);
  args[n] = NULL;
  return wait_aural(fx, spawn_aural(fx, args));
}

/* Asserts that dir holds exactly the file only (or nothing if only is
 * NULL): in particular no temporary file of an aborted run. */
static void assert_dir_holds(const char *dir, const char *only) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int found = 0;
  char extra[1024] = "";
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (only != NULL && strcmp(e->d_name, only) == 0)
      found = 1;
    else
      snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " %s",
               e->d_name);
  }
  closedir(d);
  if (extra[0] != '\0') fail_msg("%s holds unexpected files:%s", dir, extra);
  if (only != NULL && !found) fail_msg("%s/%s is missing", dir, only);
}

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  fx->root = test_tmpdir();
  snprintf(fx->in_dir, sizeof fx->in_dir, "%s/in", fx->root);
  snprintf(fx->out_dir, sizeof fx->out_dir, "%s/out", fx->root);
  assert_int_equal(mkdir(fx->in_dir, 0700), 0);
  assert_int_equal(mkdir(fx->out_dir, 0700), 0);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  test_rmtree(fx->root);
  free(fx->root);
  free(fx->out);
  free(fx->err);
  free(fx);
  return 0;
}

/* ---- Writing hostile files (as in test_audiofile.c). ---- */

/* A 16 kHz mono float32 WAV of n_frames small values, bad at bad_frame. */
static void make_float_wav(const char *path, size_t n_frames,
                           size_t bad_frame, float bad) {
  uint8_t *payload = malloc(4 * n_frames);
  assert_non_null(payload);
  for (size_t i = 0; i < n_frames; i++) {
    float v = i == bad_frame ? bad : (float)(i % 200) / 400.0f - 0.25f;
    uint32_t u;
    memcpy(&u, &v, 4);
    put_le(payload + 4 * i, u, 4);
  }
  make_wav(path, WAV_FLOAT, 1, 16000, 32, (uint32_t)(4 * n_frames), payload,
           4 * n_frames);
  free(payload);
}

/* ---- Bad inputs. ---- */

/* Runs `aural encode -q -o OUT INPUT` on a bad input twice: with no OUT,
 * then with an OUT holding "keep". Both runs must exit 1 with one line on
 * stderr naming in and mentioning keyword, leave OUT as it was, and leave
 * no temporary file behind. */
static void check_rejected(fixture *fx, const char *in, const char *keyword) {
  char out[PATH_BYTES];
  snprintf(out, sizeof out, "%s/out.npy", fx->out_dir);

  int status = run_aural(fx, "encode", "-q", "-o", out, in, NULL);
  if (status == 0) fail_msg("%s was accepted (exit 0)", in);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 1);
  assert_string_equal(fx->out, "");
  assert_true(strncmp(fx->err, "aural encode: ", 14) == 0);
  assert_non_null(strchr(fx->err, '\n'));
  assert_string_equal(strchr(fx->err, '\n'), "\n"); /* one line */
  assert_contains(fx->err, in);
  assert_contains(fx->err, keyword);
  assert_dir_holds(fx->out_dir, NULL);

  test_write_file(out, "keep", 4);
  status = run_aural(fx, "encode", "-q", "-o", out, in, NULL);
  assert_int_equal(status, 1);
  assert_contains(fx->err, in);
  assert_dir_holds(fx->out_dir, "out.npy");
  char *kept = read_text(out);
  assert_string_equal(kept, "keep");
  free(kept);
}

static void input_path(char *path, const fixture *fx, const char *name) {
  snprintf(path, PATH_BYTES, "%s/%s", fx->in_dir, name);
}

static void test_bad_missing_file(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "missing.wav");
  check_rejected(*state, in, "no such file");
}

/* A directory is a batch of inputs: with -o OUT.npy that is a usage
 * error, and a directory without audio files is an error that writes
 * nothing. */
static void test_bad_directory(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], out[PATH_BYTES], out_dir[PATH_BYTES];
  input_path(in, fx, "folder.wav");
  assert_int_equal(mkdir(in, 0700), 0);
  snprintf(out, sizeof out, "%s/out.npy", fx->out_dir);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", out, in, NULL), 2);
  assert_contains(fx->err, "output directory");
  snprintf(out_dir, sizeof out_dir, "%s/batch", fx->out_dir);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", out_dir, in, NULL), 1);
  assert_contains(fx->err, "no audio files");
  assert_contains(fx->err, in);
}

static void test_bad_empty_file(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "empty.wav");
  test_write_file(in, "", 0);
  check_rejected(*state, in, "empty");
}

static void test_bad_cut_inside_header(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "cut30.wav");
  make_pcm16_wav(in, 1000, 2000);
  assert_int_equal(truncate(in, 30), 0);
  check_rejected(*state, in, "truncated|'data' chunk");
}

static void test_bad_truncated_data(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "trunc.wav");
  make_pcm16_wav(in, 8000, 4 * 8000); /* declares twice what is there */
  check_rejected(*state, in, "truncated");
}

/* The cut-off data chunk behind 100 small chunks of an unknown kind. */
static void test_bad_truncated_data_after_many_chunks(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "trunc-chunks.wav");
  make_truncated_wav_after_chunks(in, 100, 8000);
  check_rejected(*state, in, "truncated");
}

static void test_bad_text_renamed_wav(void **state) {
  static const char text[] = "Meeting notes, 3 March.\nNothing to hear.\n";
  char in[PATH_BYTES];
  input_path(in, *state, "notes.wav");
  test_write_file(in, text, sizeof text - 1);
  check_rejected(*state, in, "not a readable audio file");
}

/* The NaN comes after the first 4096-frame read, when rows have already
 * been streamed to the temporary output. */
static void test_bad_nan(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "nan.wav");
  make_float_wav(in, 16000, 12345, NAN);
  check_rejected(*state, in, "NaN");
  assert_contains(((fixture *)*state)->err, "frame 12345");
  assert_contains(((fixture *)*state)->err, "non-finite samples are rejected");
}

static void test_bad_infinity(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "inf.wav");
  make_float_wav(in, 16000, 9000, INFINITY);
  check_rejected(*state, in, "infinite|inf ");
  assert_contains(((fixture *)*state)->err, "frame 9000");
  assert_contains(((fixture *)*state)->err, "non-finite samples are rejected");
}

static void make_rate_wav(const char *path, uint32_t rate_hz) {
  uint8_t payload[4000] = {0};
  make_wav(path, WAV_PCM, 1, rate_hz, 16, sizeof payload, payload,
           sizeof payload);
}

static void test_bad_rate_zero(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "rate0.wav");
  make_rate_wav(in, 0);
  check_rejected(*state, in, "0 Hz|sample rate");
}

static void test_bad_rate_one(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "rate1.wav");
  make_rate_wav(in, 1);
  check_rejected(*state, in, " 1 Hz");
}

static void test_bad_rate_ten_million(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "rate10M.wav");
  make_rate_wav(in, 10000000);
  check_rejected(*state, in, "10000000 Hz");
}

static void test_bad_zero_channels(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "ch0.wav");
  uint8_t payload[4000] = {0};
  make_wav(in, WAV_PCM, 0, 16000, 16, sizeof payload, payload,
           sizeof payload);
  check_rejected(*state, in, "channel");
}

static void test_bad_hundred_thousand_channels(void **state) {
  char in[PATH_BYTES];
  input_path(in, *state, "ch100k.au");
  make_au(in, 16000, 100000, 4000);
  check_rejected(*state, in, "channel");
}

/* ---- Bad command lines and outputs. ---- */

static void test_help(void **state) {
  fixture *fx = *state;
  assert_int_equal(run_aural(fx, "--help", NULL), 0);
  assert_contains(fx->out, "encode");
  assert_int_equal(run_aural(fx, "encode", "--help", NULL), 0);
  assert_contains(fx->out, "-o");
  assert_contains(fx->out, "Exit status");
}

/* Every --help fits a terminal of 80 columns, also where it names the
 * default model and socket, with paths as long as an installed model's
 * and a socket under XDG_RUNTIME_DIR with a uid of seven digits. */
static void test_help_fits_80_columns(void **state) {
  fixture *fx = *state;
  const char *model_was = getenv("AURAL_MODEL");
  assert_non_null(model_was);
  char *model = strdup(model_was);
  const char *socket = getenv("AURAL_SOCKET");
  char *socket_was = socket ? strdup(socket) : NULL;
  assert_non_null(model);
  setenv("AURAL_MODEL", "/usr/share/aural/default.safetensors", 1);
  setenv("AURAL_SOCKET", "/run/user/1000000/aural.sock", 1);
  const char *cmds[] = {"",     "encode", "info", "bench",    "sub",
                        "send", "stats",  "load", "pronounce"};
  char wide[256] = "";
  int rcs = 0;
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    rcs |= cmds[i][0] ? run_aural(fx, cmds[i], "--help", NULL)
                      : run_aural(fx, "--help", NULL);
    for (const char *line = fx->out; *line != '\0' && !wide[0];) {
      size_t n = strcspn(line, "\n");
      if (n > 80)
        snprintf(wide, sizeof wide,
                 "aural %s --help: a line of %zu columns: %.*s", cmds[i], n,
                 (int)n, line);
      line += n + (line[n] == '\n');
    }
  }
  /* The environment back before any assertion, for the tests after. */
  setenv("AURAL_MODEL", model, 1);
  if (socket_was != NULL)
    setenv("AURAL_SOCKET", socket_was, 1);
  else
    unsetenv("AURAL_SOCKET");
  free(model);
  free(socket_was);
  assert_int_equal(rcs, 0);
  if (wide[0]) fail_msg("%s", wide);
}

static char *copy_speech(const char *path, size_t *len);

static void test_usage_errors(void **state) {
  fixture *fx = *state;
  char out[PATH_BYTES], in[PATH_BYTES];
  snprintf(out, sizeof out, "%s/out.npy", fx->out_dir);
  snprintf(in, sizeof in, "%s", test_data_path("fbank/speech.wav"));

  assert_int_equal(run_aural(fx, NULL), 2);
  assert_contains(fx->err, "Usage");
  assert_int_equal(run_aural(fx, "frobnicate", NULL), 2);
  assert_contains(fx->err, "unknown command 'frobnicate'");
  assert_int_equal(run_aural(fx, "encode", in, NULL), 2);
  assert_contains(fx->err, "-o OUT.npy is required");
  assert_int_equal(run_aural(fx, "encode", "-o", out, NULL), 2);
  assert_contains(fx->err, "an INPUT file is required");
  /* Several inputs write one file each into a directory, not OUT.npy. */
  assert_int_equal(run_aural(fx, "encode", "-o", out, in, in, NULL), 2);
  assert_contains(fx->err, "with several inputs, -o names the output "
                           "directory");
  /* So does one given -j, and the message says that it is -j (it said
   * "with several inputs or a directory" of a lone file). */
  assert_int_equal(run_aural(fx, "encode", "-j", "2", "-o", out, in, NULL),
                   2);
  assert_contains(fx->err, "/out.npy: with -j, -o names the output "
                           "directory");
  assert_int_equal(run_aural(fx, "encode", "-j", "2", in, NULL), 2);
  assert_contains(fx->err, "-o DIR is required with -j");
  /* An -o that is a file, where a directory is needed, is named for what
   * needs one (it said "when there are several inputs" of a lone one). */
  char not_dir[PATH_BYTES];
  snprintf(not_dir, sizeof not_dir, "%s/results", fx->out_dir);
  test_write_file(not_dir, "x", 1);
  assert_int_equal(
      run_aural(fx, "encode", "-q", "-j", "2", "-o", not_dir, in, NULL), 1);
  assert_contains(fx->err, "must be a directory with -j");
  char copy[PATH_BYTES];
  size_t len;
  input_path(copy, fx, "speech.wav");
  free(copy_speech(copy, &len));
  assert_int_equal(
      run_aural(fx, "encode", "-q", "-o", not_dir, fx->in_dir, NULL), 1);
  assert_contains(fx->err, "must be a directory with a directory as INPUT");
  unlink(not_dir);
  unlink(copy);
  assert_int_equal(
      run_aural(fx, "encode", "--output", "bogus", "-o", out, in, NULL), 2);
  assert_contains(fx->err, "--output bogus");
  assert_int_equal(run_aural(fx, "encode", "--frobnicate", "-o", out, in,
                             NULL),
                   2);
  assert_contains(fx->err, "aural encode --help");
  /* getopt's message names the command as it is run (it said "encode:"). */
  assert_true(strncmp(fx->err, "aural encode: unrecognized option", 33) == 0);
  /* Options of the words decoder without --output words (they were
   * ignored). */
  const char *words_only[][2] = {{"--format", "srt"}, {"--beam", "5"},
                                 {"--lexicon", "none.txt"}, {"--lm", "x"},
                                 {"--boost", "2"}, {"--g2p", "x"},
                                 {"--vocabulary", "Fox"}};
  for (size_t i = 0; i < sizeof words_only / sizeof *words_only; i++) {
    assert_int_equal(run_aural(fx, "encode", words_only[i][0],
                               words_only[i][1], "-o", out, in, NULL),
                     2);
    assert_contains(fx->err, words_only[i][0]);
    assert_contains(fx->err, "needs --output words");
  }
  /* --show draws rows of numbers: with text or words it was ignored. */
  const char *texts[] = {"text", "words"};
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(run_aural(fx, "encode", "--show", "--output", texts[i],
                               "-o", out, in, NULL),
                     2);
    assert_contains(fx->err, "--show");
    assert_contains(fx->err, texts[i]);
  }
  /* A malformed custom-word list and a boost with no custom words are bad
   * command lines, as in aural sub and send (the list was judged only
   * after the model and the LM had loaded, exit 1; the boost was
   * ignored). */
  assert_int_equal(run_aural(fx, "encode", "--output", "words",
                             "--vocabulary", "Fox,,Dog", "-o", out, in, NULL),
                   2);
  assert_contains(fx->err, "--vocabulary: a comma-separated list");
  assert_int_equal(run_aural(fx, "encode", "--output", "words", "--boost",
                             "2", "-o", out, in, NULL),
                   2);
  assert_contains(fx->err, "--boost needs --vocabulary");
  /* A WORD no model can take is a bad command line (it exited 1, as for
   * a word espeak-ng cannot say), told before any model is read. */
  const char *bad_words[] = {"", "two words", "a,b", "#hash",
                             "x2345678901234567890123456789012345678901234567"
                             "890123456789012345"};
  for (size_t i = 0; i < sizeof bad_words / sizeof *bad_words; i++) {
    assert_int_equal(run_aural(fx, "pronounce", "-m", "no-such-model",
                               "hello", bad_words[i], NULL),
                     2);
    assert_contains(fx->err, "custom words");
    assert_contains(fx->err, "aural pronounce --help");
  }
  /* The same words as --vocabulary of send and sub: refused before
   * anything is sent (aurald refused them, exit 1). */
  char sock[PATH_BYTES];
  snprintf(sock, sizeof sock, "%s/none.sock", fx->root);
  for (size_t i = 1; i < sizeof bad_words / sizeof *bad_words; i++) {
    if (strchr(bad_words[i], ',') != NULL) continue; /* two words */
    char list[128];
    snprintf(list, sizeof list, "hello,%s", bad_words[i]);
    assert_int_equal(run_aural(fx, "send", "-s", sock, "--vocabulary", list,
                               in, NULL),
                     2);
    assert_contains(fx->err, "--vocabulary");
    assert_int_equal(run_aural(fx, "sub", "-s", sock, "--stream", "x",
                               "--output", "words", "--vocabulary", list,
                               NULL),
                     2);
    assert_contains(fx->err, "--vocabulary");
  }
  /* --dtype with neither embeddings nor logits asked for had nothing to
   * change, and was ignored. */
  assert_int_equal(run_aural(fx, "sub", "-s", sock, "--stream", "x",
                             "--output", "text,words", "--dtype", "f16",
                             NULL),
                   2);
  assert_contains(fx->err, "--dtype");
  assert_contains(fx->err, "--output asks for neither");
  assert_dir_holds(fx->out_dir, NULL);
}

static void test_output_directory_missing(void **state) {
  fixture *fx = *state;
  char out[PATH_BYTES];
  snprintf(out, sizeof out, "%s/no-such-dir/out.npy", fx->out_dir);
  int status = run_aural(fx, "encode", "-q", "-o", out,
                         test_data_path("fbank/speech.wav"), NULL);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 1);
  assert_contains(fx->err, out);
  assert_contains(fx->err, "no such file or directory");
  assert_dir_holds(fx->out_dir, NULL);
}

/* OUT is an existing directory: the rename at the end fails, and the
 * temporary file beside it must go. */
static void test_output_is_directory(void **state) {
  fixture *fx = *state;
  int status = run_aural(fx, "encode", "-q", "-o", fx->out_dir,
                         test_data_path("fbank/speech.wav"), NULL);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 1);
  assert_contains(fx->err, fx->out_dir);
  assert_contains(fx->err, "directory");
  assert_dir_holds(fx->out_dir, NULL);
  DIR *d = opendir(fx->root);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0)
      fail_msg("%s/%s was left behind", fx->root, e->d_name);
  closedir(d);
}

/* Waits (up to 10 s) until process pid has a file in dir open: how a test
 * knows the tool is writing its output, whether or not that file has a
 * name. Returns 1 if it saw one. */
static int wait_open_in(pid_t pid, const char *dir) {
  char fd_dir[64], prefix[PATH_BYTES];
  snprintf(fd_dir, sizeof fd_dir, "/proc/%d/fd", (int)pid);
  snprintf(prefix, sizeof prefix, "%s/", dir);
  for (int i = 0; i < 1000; i++) {
    DIR *d = opendir(fd_dir);
    if (d == NULL) return 0; /* the process is gone */
    int seen = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && !seen;) {
      char link[PATH_BYTES + 64], target[PATH_BYTES];
      snprintf(link, sizeof link, "%s/%s", fd_dir, e->d_name);
      ssize_t n = readlink(link, target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      seen = strncmp(target, prefix, strlen(prefix)) == 0;
    }
    closedir(d);
    if (seen) return 1;
    sleep_ms(10);
  }
  return 0;
}

/* Makes the FIFO in, starts `aural ARGS` reading it and returns the
 * FIFO's writing end (blocking) once the tool has opened it, which it does
 * after installing its signal handlers. */
static int spawn_fifo_reader(fixture *fx, const char *in,
                             const char *const *args, pid_t *pid) {
  assert_int_equal(mkfifo(in, 0600), 0);
  *pid = spawn_aural(fx, args);
  /* A non-blocking open for writing succeeds once there is a reader. */
  int fd = -1;
  for (int i = 0; i < 1000 && fd < 0; i++) {
    fd = open(in, O_WRONLY | O_NONBLOCK);
    if (fd < 0) {
      assert_int_equal(errno, ENXIO);
      sleep_ms(10);
    }
  }
  if (fd < 0) {
    kill(*pid, SIGKILL);
    wait_aural(fx, *pid);
    fail_msg("aural never opened %s", in);
  }
  assert_int_equal(fcntl(fd, F_SETFL, 0), 0);
  return fd;
}

/* Starts `aural ARGS` reading the FIFO in, writes a WAV header of unknown
 * length and 0.5 s of audio into it and waits until the tool has a file
 * in the output directory open. Returns the writing end of the FIFO (the
 * tool waits for more audio); *busy tells whether the output was seen. */
static int start_live_encode(fixture *fx, const char *in,
                             const char *const *args, pid_t *pid, int *busy) {
  int fd = spawn_fifo_reader(fx, in, args, pid);

  /* A WAV of unknown length, as a live recorder writes it, and 0.5 s. */
  enum { N_FRAMES = 8000 };
  uint8_t *b = malloc(44 + 2 * N_FRAMES);
  assert_non_null(b);
  wav_header(b, WAV_PCM, 1, 16000, 16, 0xFFFFFFFFu);
  fill_pcm16(b + 44, N_FRAMES);
  assert_int_equal(write(fd, b, 44 + 2 * N_FRAMES), 44 + 2 * N_FRAMES);
  free(b);
  *busy = wait_open_in(*pid, fx->out_dir);
  return fd;
}

/* Ctrl-C while the tool is reading: it must exit 130 and leave nothing.
 * The input is a FIFO, so the test decides when the input ends. */
static void test_sigint_leaves_nothing(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], out[PATH_BYTES];
  input_path(in, fx, "live.wav");
  snprintf(out, sizeof out, "%s/out.npy", fx->out_dir);
  void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
  const char *args[] = {"encode", "-q", "-o", out, in, NULL};
  pid_t pid;
  int busy;
  int fd = start_live_encode(fx, in, args, &pid, &busy);
  assert_int_equal(kill(pid, SIGINT), 0);
  /* More audio, then the end, so a tool blocked in read() wakes up. */
  uint8_t more[200] = {0};
  assert_int_equal(write(fd, more, sizeof more), (ssize_t)sizeof more);
  close(fd);

  int status = wait_aural(fx, pid);
  signal(SIGPIPE, old_pipe);
  print_message("    exit %d: %s", status, fx->err);
  assert_true(busy);
  assert_int_equal(status, 130);
  assert_contains(fx->err, "interrupted");
  assert_dir_holds(fx->out_dir, NULL);
}

/* Whether process pid catches signal sig now (its handler is installed):
 * from the SigCgt mask in /proc/PID/status. */
static int catches_signal(pid_t pid, int sig) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  unsigned long long mask = 0;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "SigCgt: %llx", &mask) == 1) break;
  fclose(f);
  return (mask >> (sig - 1)) & 1;
}

/* Sends SIGINT to pid, then signal second once the first has arrived (two
 * pending signals are one), and checks that the second ended it at once,
 * by that signal. fd, the writer of the FIFO the tool reads, is closed
 * only afterwards: the tool had no audio to wake it. */
static void assert_second_signal_ends(fixture *fx, pid_t pid, int fd,
                                      int second) {
  assert_int_equal(kill(pid, SIGINT), 0);
  /* With the fix the second's handler is gone once the first arrived. */
  for (int i = 0; i < 500 && catches_signal(pid, second); i++) sleep_ms(10);
  assert_int_equal(kill(pid, second), 0);
  int status = 0, gone = 0;
  for (int i = 0; i < 500 && !gone; i++) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    assert_true(got >= 0);
    gone = got == pid;
    if (!gone) sleep_ms(10);
  }
  close(fd);
  if (!gone) {
    waitpid(pid, &status, 0);
    fail_msg("still waiting for audio 5 s after a second signal (%s)",
             strsignal(second));
  }
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), second);
  assert_dir_holds(fx->out_dir, NULL);
}

/* A second Ctrl-C (or a SIGTERM after a Ctrl-C) ends the tool at once.
 * The first asks it to stop where it can, but a read from a FIFO whose
 * writer is idle does not end on a signal (libsndfile reads again), so
 * that the tool waited for audio that may never come, deaf to every
 * further Ctrl-C. Nothing is left behind either way. */
static void second_signal_quits_at_once(fixture *fx, int second) {
  char in[PATH_BYTES], out[PATH_BYTES];
  input_path(in, fx, "live.wav");
  snprintf(out, sizeof out, "%s/out.npy", fx->out_dir);
  void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
  const char *args[] = {"encode", "-q", "-o", out, in, NULL};
  pid_t pid;
  int busy;
  int fd = start_live_encode(fx, in, args, &pid, &busy);
  assert_true(busy);
  assert_second_signal_ends(fx, pid, fd, second);
  signal(SIGPIPE, old_pipe);
}

/* aural send reading a FIFO whose writer has written nothing yet waits in
 * libsndfile's read of the header, which a signal does not end: the
 * second Ctrl-C, or a SIGTERM after the first, must. (No aurald is
 * needed: the input is read first.) */
static void send_second_signal_quits_at_once(fixture *fx, int second) {
  char in[PATH_BYTES], sock[PATH_BYTES];
  input_path(in, fx, "live.wav");
  snprintf(sock, sizeof sock, "%s/none.sock", fx->root);
  const char *args[] = {"send", "-s", sock, in, NULL};
  pid_t pid;
  int fd = spawn_fifo_reader(fx, in, args, &pid);
  assert_second_signal_ends(fx, pid, fd, second);
}

static void test_send_second_sigint_quits_at_once(void **state) {
  send_second_signal_quits_at_once(*state, SIGINT);
}

static void test_send_sigterm_after_sigint_quits_at_once(void **state) {
  send_second_signal_quits_at_once(*state, SIGTERM);
}

static void test_second_sigint_quits_at_once(void **state) {
  second_signal_quits_at_once(*state, SIGINT);
}

static void test_sigterm_after_sigint_quits_at_once(void **state) {
  second_signal_quits_at_once(*state, SIGTERM);
}

/* ---- Good inputs against the goldens. ---- */

static void test_goldens(void **state) {
  fixture *fx = *state;
  FILE *cases = fopen(test_data_path("fbank/cases.txt"), "r");
  assert_non_null(cases);
  char name[64];
  double rate_hz;
  int n_channels, n_cases = 0, n_bad = 0;
  size_t n_frames;
  while (fscanf(cases, "%63s %lf %d %zu", name, &rate_hz, &n_channels,
                &n_frames) == 4) {
    char rel[128], in[PATH_BYTES], golden[PATH_BYTES], out[PATH_BYTES];
    snprintf(rel, sizeof rel, "fbank/%s.wav", name);
    snprintf(in, sizeof in, "%s", test_data_path(rel));
    snprintf(rel, sizeof rel, "fbank/%s.npy", name);
    snprintf(golden, sizeof golden, "%s", test_data_path(rel));
    snprintf(out, sizeof out, "%s/%s.npy", fx->out_dir, name);
    n_cases++;

    int status = run_aural(fx, "encode", "-q", "--output", "features", "-o",
                           out, in, NULL);
    if (status != 0) {
      printf("  %-13s exit %d: %s", name, status, fx->err);
      n_bad++;
      continue;
    }
    assert_string_equal(fx->out, ""); /* -q: nothing but errors */
    assert_string_equal(fx->err, "");

    float *want, *got;
    size_t want_rows, want_cols, got_rows, got_cols;
    char msg[PATH_BYTES + 64];
    if (npy_read_f32(golden, &want, &want_rows, &want_cols, msg,
                     sizeof msg) < 0 ||
        npy_read_f32(out, &got, &got_rows, &got_cols, msg, sizeof msg) < 0)
      fail_msg("%s", msg);
    assert_int_equal(want_rows, n_frames);
    double worst = 0;
    if (got_rows != want_rows || got_cols != want_cols) {
      printf("  %-13s shape (%zu, %zu), golden (%zu, %zu)\n", name,
             got_rows, got_cols, want_rows, want_cols);
      n_bad++;
    } else {
      for (size_t i = 0; i < got_rows * got_cols; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= worst)) worst = d; /* NaN counts as worst */
      }
      int ok = worst <= GOLDEN_TOLERANCE;
      printf("  %-13s %6.0f Hz %d ch  (%3zu, %zu)  max |diff| %.2e%s\n",
             name, rate_hz, n_channels, got_rows, got_cols, worst,
             ok ? "" : "  > tolerance");
      n_bad += !ok;
    }
    free(want);
    free(got);
  }
  fclose(cases);
  assert_true(n_cases >= 10);
  if (n_bad > 0)
    fail_msg("%d of %d golden cases failed (tolerance %g)", n_bad, n_cases,
             GOLDEN_TOLERANCE);
}

/* Without -q the tool reports what it did (on stdout or stderr); --show
 * draws the result. */
static void test_summary_and_show(void **state) {
  fixture *fx = *state;
  char out[PATH_BYTES];
  snprintf(out, sizeof out, "%s/speech.npy", fx->out_dir);
  const char *in = test_data_path("fbank/speech.wav");
  assert_int_equal(run_aural(fx, "encode", "--show", "--output", "features",
                             "-o", out, in, NULL),
                   0);
  char *said;
  assert_true(asprintf(&said, "%s%s", fx->out, fx->err) > 0);
  assert_contains(said, "16000 Hz");
  assert_contains(said, "108 frames x 80");
  assert_contains(said, out);
  assert_contains(said, "log-mel");
  free(said);
  assert_dir_holds(fx->out_dir, "speech.npy");
}

/* The peak memory (kB) of aural run with the NULL-terminated args, which
 * must succeed; its stdout is then in fx->out. */
static long peak_kb_of(fixture *fx, const char *const *args) {
  pid_t pid = spawn_aural(fx, args);
  int status;
  struct rusage ru;
  pid_t got;
  while ((got = wait4(pid, &status, 0, &ru)) < 0 && errno == EINTR) {
  }
  assert_int_equal(got, pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  char path[PATH_BYTES];
  snprintf(path, sizeof path, "%s/stdout.txt", fx->root);
  free(fx->out);
  fx->out = read_text(path);
  return ru.ru_maxrss;
}

/* --show draws 24 lines, so its memory does not grow with the input: it
 * kept every row of the output (and sorted a copy of them all), about
 * 56 MB more for 10 minutes of features, gigabytes for a day of audio. */
static void test_show_memory_bounded(void **state) {
  fixture *fx = *state;
  enum { N_FRAMES = 16000 * 600 }; /* 10 minutes */
  char in[PATH_BYTES], out[PATH_BYTES];
  input_path(in, fx, "long.wav");
  snprintf(out, sizeof out, "%s/long.npy", fx->out_dir);
  uint8_t *b = malloc(44 + 2 * (size_t)N_FRAMES);
  assert_non_null(b);
  wav_header(b, WAV_PCM, 1, 16000, 16, 2u * N_FRAMES);
  fill_pcm16(b + 44, N_FRAMES);
  test_write_file(in, b, 44 + 2 * (size_t)N_FRAMES);
  free(b);
  const char *plain[] = {"encode", "-q", "--output", "features", "-o", out,
                         in, NULL};
  const char *shown[] = {"encode", "-q", "--show", "--output", "features",
                         "-o", out, in, NULL};
  long plain_kb = peak_kb_of(fx, plain);
  long shown_kb = peak_kb_of(fx, shown);
  print_message("    peak %ld kB, with --show %ld kB\n", plain_kb, shown_kb);
  assert_contains(fx->out, "log-mel energy");
  /* The whole input in 24 lines, the last one starting past 570 s. */
  size_t lines = 0;
  double last_s = 0;
  for (const char *at = fx->out; (at = strstr(at, " s |")) != NULL; at++) {
    const char *start = at;
    while (start > fx->out && start[-1] != '\n') start--;
    last_s = strtod(start, NULL);
    lines++;
  }
  assert_int_equal(lines, 24);
  assert_true(last_s > 570 && last_s < 600);
  assert_true(shown_kb - plain_kb < 16 * 1024);
}

/* ---- The encoder through the CLI. ---- */

/* Chunk size changes how frames are grouped, never the result: the files
 * are identical byte for byte, for embeddings, logits and text. */
static void test_encode_chunk_frames_invariance(void **state) {
  fixture *fx = *state;
  const char *in = test_data_path("fbank/stereo44k.wav");
  const char *kinds[] = {"embeddings", "logits", "text"};
  const char *chunks[] = {"1", "7", "50", "1000"};
  for (size_t k = 0; k < 3; k++) {
    char *first = NULL;
    size_t first_len = 0;
    for (size_t c = 0; c < 4; c++) {
      char out[PATH_BYTES];
      snprintf(out, sizeof out, "%s/%s-%s.out", fx->out_dir, kinds[k],
               chunks[c]);
      assert_int_equal(run_aural(fx, "encode", "-q", "--output", kinds[k],
                                 "--chunk-frames", chunks[c], "-o", out, in,
                                 NULL),
                       0);
      size_t len;
      char *got = test_read_file(out, &len);
      if (first == NULL) {
        first = got;
        first_len = len;
        if (strcmp(kinds[k], "text") != 0) {
          float *rows;
          size_t n_rows, n_cols;
          char msg[256];
          assert_int_equal(npy_read_f32(out, &rows, &n_rows, &n_cols, msg,
                                        sizeof msg),
                           0);
          assert_int_equal(n_rows, 108);
          assert_int_equal(n_cols, strcmp(kinds[k], "logits") == 0 ? 10 : 32);
          free(rows);
        }
        continue;
      }
      assert_int_equal(len, first_len);
      assert_memory_equal(got, first, len);
      free(got);
    }
    free(first);
  }
}

/* Without -o the transcript goes to stdout, alone: the line per chunk and
 * the summary go to stderr, so that 'aural encode --output text in.wav >
 * out.txt' gives the same file with and without -q. */
static void test_encode_text_prints_chunks(void **state) {
  fixture *fx = *state;
  const char *in = test_data_path("fbank/speech.wav");
  assert_int_equal(
      run_aural(fx, "encode", "-q", "--output", "text", in, NULL), 0);
  char *quiet = strdup(fx->out);
  assert_non_null(quiet);
  assert_true(strlen(quiet) > 1);
  assert_string_equal(fx->err, "");
  assert_int_equal(run_aural(fx, "encode", "--output", "text", in, NULL), 0);
  assert_string_equal(fx->out, quiet);
  assert_contains(fx->err, "[   0.00 s]");
  assert_contains(fx->err, "[   0.50 s]");
  /* The summary counts the tokens written ("x 1 text" said nothing). */
  size_t n_tokens = 0;
  for (const char *tok = strtok(quiet, " \n"); tok != NULL;
       tok = strtok(NULL, " \n"))
    n_tokens++;
  assert_true(n_tokens > 1);
  char shape[64];
  snprintf(shape, sizeof shape, "108 frames, %zu tokens in ", n_tokens);
  assert_contains(fx->err, shape);
  free(quiet);
  assert_dir_holds(fx->out_dir, NULL);
}

/* A result that cannot be written to stdout (a full disk) is a failure
 * that names stdout and the reason, for every command, whether it checks
 * its own writes or leaves it to the end of main(). */
static void test_full_stdout_fails(void **state) {
  fixture *fx = *state;
  const char *in = test_data_path("fbank/speech.wav");
  const char *model = getenv("AURAL_DEFAULT_MODEL");
  assert_non_null(model);
  fx->stdout_to = "/dev/full";
  const char *const runs[][MAX_ARGS] = {
      {"encode", "-q", "--output", "text", in, NULL},
      {"encode", "--output", "text", in, NULL},
      {"info", NULL},
      {"pronounce", "-m", model, "hello", NULL},
      {"--version", NULL},
      /* More than stdio's buffer in one printf: the write failed inside
       * it, and the reason was lost ('Input/output error'). */
      {"encode", "--help", NULL},
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    int status = wait_aural(fx, spawn_aural(fx, runs[i]));
    if (status != 1 || strstr(fx->err, "standard output: ") == NULL ||
        strstr(fx->err, strerror(ENOSPC)) == NULL)
      fail_msg("aural %s >/dev/full exited %d; stderr:\n%s", runs[i][0],
               status, fx->err);
  }
  fx->stdout_to = NULL;
}

/* -o - is standard output, as on most command lines: the .npy arrives
 * there byte for byte as -o FILE writes it, the reports go to stderr, and
 * no file named "-" appears. With several inputs it is refused (-o names
 * a directory there). */
static void test_encode_dash_is_stdout(void **state) {
  fixture *fx = *state;
  const char *in = test_data_path("fbank/speech.wav");
  char want_path[PATH_BYTES], got_path[PATH_BYTES];
  snprintf(want_path, sizeof want_path, "%s/want.npy", fx->root);
  snprintf(got_path, sizeof got_path, "%s/got.npy", fx->root);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", want_path, in, NULL),
                   0);
  size_t want_len;
  char *want = test_read_file(want_path, &want_len);
  struct stat st;
  assert_int_not_equal(stat("-", &st), 0);
  fx->stdout_to = got_path;
  for (int quiet = 0; quiet < 2; quiet++) {
    const char *q = quiet ? "-q" : "--output=embeddings";
    assert_int_equal(run_aural(fx, "encode", q, "-o", "-", in, NULL), 0);
    size_t got_len;
    char *got = test_read_file(got_path, &got_len);
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);
    free(got);
    if (!quiet) assert_contains(fx->err, "108 frames");
  }
  fx->stdout_to = NULL;
  assert_int_not_equal(stat("-", &st), 0);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", "-", in, in, NULL), 2);
  assert_contains(fx->err, "names the output directory");
  free(want);
}

/* Started with fd 1 closed, a result printed to stdout is lost, so the
 * command fails naming stdout, as a shell's builtins do; it used to go
 * into the /dev/null that holds the number, with exit status 0. Reports
 * beside a result written to a file are no loss (test above). */
static void test_closed_stdout_result_fails(void **state) {
  fixture *fx = *state;
  const char *in = test_data_path("fbank/speech.wav");
  fx->stdout_closed = 1;
  assert_int_equal(
      run_aural(fx, "encode", "-q", "--output", "text", in, NULL), 1);
  assert_contains(fx->err, "aural encode: standard output: Bad file "
                           "descriptor");
  assert_int_equal(run_aural(fx, "--version", NULL), 1);
  assert_contains(fx->err, "standard output: Bad file descriptor");
  fx->stdout_closed = 0;
  assert_int_equal(run_aural(fx, "--version", NULL), 0);
}

/* Started with fd 1 closed, the tool does not hand that number to the
 * first file it opens: the reports of 'encode -o' (which go to stdout)
 * stay out of the output file, which holds the transcript alone; and
 * -o - is refused rather than thrown away. */
static void test_closed_stdout_stays_apart(void **state) {
  fixture *fx = *state;
  const char *in = test_data_path("fbank/speech.wav");
  char want_path[PATH_BYTES], out[PATH_BYTES];
  snprintf(want_path, sizeof want_path, "%s/want.txt", fx->root);
  snprintf(out, sizeof out, "%s/speech.txt", fx->out_dir);
  assert_int_equal(run_aural(fx, "encode", "-q", "--output", "text", "-o",
                             want_path, in, NULL),
                   0);
  fx->stdout_closed = 1;
  assert_int_equal(
      run_aural(fx, "encode", "--output", "text", "-o", out, in, NULL), 0);
  /* An output asked of the closed stdout itself would vanish into the
   * /dev/null that holds its number: refused, as a write to it would be. */
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", "-", in, NULL), 1);
  assert_contains(fx->err, "standard output is closed");
  fx->stdout_closed = 0;
  char *want = read_text(want_path), *got = read_text(out);
  assert_true(strlen(want) > 1);
  assert_string_equal(got, want);
  free(want);
  free(got);
  assert_dir_holds(fx->out_dir, "speech.txt");
}

static void test_encode_bad_model(void **state) {
  fixture *fx = *state;
  char out[PATH_BYTES], model[PATH_BYTES];
  snprintf(out, sizeof out, "%s/out.npy", fx->out_dir);
  const char *in = test_data_path("fbank/speech.wav");
  snprintf(model, sizeof model, "%s/missing.safetensors", fx->in_dir);
  assert_int_equal(run_aural(fx, "encode", "-m", model, "-o", out, in, NULL),
                   1);
  assert_contains(fx->err, "missing.safetensors");
  snprintf(model, sizeof model, "%s/notes.safetensors", fx->in_dir);
  test_write_file(model, "not a model\n", 12);
  assert_int_equal(run_aural(fx, "encode", "-m", model, "-o", out, in, NULL),
                   1);
  assert_contains(fx->err, "notes.safetensors");
  assert_contains(fx->err, "header");
  /* Logits or text need a CTC head. */
  char nohead[PATH_BYTES];
  snprintf(nohead, sizeof nohead, "%s",
           test_data_path("encoder/postnorm_relu_sin.safetensors"));
  assert_int_equal(run_aural(fx, "encode", "-m", nohead, "--output", "logits",
                             "-o", out, in, NULL),
                   1);
  assert_contains(fx->err, "no CTC head");
  assert_dir_holds(fx->out_dir, NULL);
  /* A model that overflows on this audio (input_scale 1e300): its NaN
   * outputs were written, exit 0; now nothing is, exit 1, naming the
   * frame. */
  size_t size;
  char *bytes = test_loud_model(&size);
  snprintf(model, sizeof model, "%s/loud.safetensors", fx->in_dir);
  test_write_file(model, bytes, size);
  free(bytes);
  in = test_data_path("fbank/speech.wav"); /* its buffer was reused */
  assert_int_equal(run_aural(fx, "encode", "-m", model, "-o", out, in, NULL),
                   1);
  assert_contains(fx->err, "speech.wav");
  assert_contains(fx->err, "NaN or infinite from frame");
  assert_dir_holds(fx->out_dir, NULL);
  assert_int_equal(run_aural(fx, "encode", "--chunk-frames", "0", "-o", out,
                             in, NULL),
                   2);
  /* Digits alone: strtoull negates what follows a minus after a space,
   * which made the first of these 1. */
  const char *bad[] = {" -18446744073709551615", " -1", "-1", "+5", " 5",
                       "5 ", "", "0x10", "1e3", "18446744073709551616",
                       "100001"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(run_aural(fx, "encode", "--chunk-frames", bad[i], "-o",
                               out, in, NULL),
                     2);
    assert_contains(fx->err, "--chunk-frames");
    assert_contains(fx->err, "1..100000");
  }
  assert_dir_holds(fx->out_dir, NULL);
}

/* ---- Where -o writes: never over what it should not replace. ---- */

/* Copies the test recording to dir/name (the tests below must never risk
 * the shared test data) and returns its bytes. */
static char *copy_speech(const char *path, size_t *len) {
  char *bytes = test_read_file(test_data_path("fbank/speech.wav"), len);
  test_write_file(path, bytes, *len);
  return bytes;
}

static void assert_same_bytes(const char *path, const char *want,
                              size_t want_len) {
  size_t len;
  char *got = test_read_file(path, &len);
  assert_int_equal(len, want_len);
  assert_memory_equal(got, want, len);
  free(got);
}

/* -o naming the input (directly, through a symbolic link, or as a hard
 * link) is refused before anything is written: the input stays as it
 * was, byte for byte. */
static void test_output_is_input_refused(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], sym[PATH_BYTES], hard[PATH_BYTES];
  input_path(in, fx, "speech.wav");
  size_t len;
  char *want = copy_speech(in, &len);

  int status = run_aural(fx, "encode", "-q", "-o", in, in, NULL);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 1);
  assert_contains(fx->err, in);
  assert_contains(fx->err, "is the input");
  assert_same_bytes(in, want, len);

  snprintf(sym, sizeof sym, "%s/speech.npy", fx->out_dir);
  assert_int_equal(symlink(in, sym), 0);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", sym, in, NULL), 1);
  assert_contains(fx->err, "is the input");
  assert_same_bytes(in, want, len);

  snprintf(hard, sizeof hard, "%s/hard.wav", fx->in_dir);
  assert_int_equal(link(in, hard), 0);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", hard, in, NULL), 1);
  assert_contains(fx->err, "is the input");
  assert_same_bytes(in, want, len);
  free(want);
}

/* A replaced output keeps its mode: a private file stays private (it used
 * to become 0666 less the umask). A new one gets 0666 less the umask. */
static void test_output_keeps_its_mode(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], out[PATH_BYTES], fresh[PATH_BYTES];
  input_path(in, fx, "speech.wav");
  size_t len;
  free(copy_speech(in, &len));
  snprintf(out, sizeof out, "%s/private.npy", fx->out_dir);
  int fd = open(out, O_CREAT | O_WRONLY | O_TRUNC, 0600);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(chmod(out, 0600), 0);
  mode_t mask = umask(022);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", out, in, NULL), 0);
  snprintf(fresh, sizeof fresh, "%s/fresh.npy", fx->out_dir);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", fresh, in, NULL), 0);
  umask(mask);
  struct stat st;
  assert_int_equal(stat(out, &st), 0);
  assert_true(st.st_size > 128);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(stat(fresh, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0644);
}

/* -o through a symbolic link to a regular file writes the file it points
 * to and leaves the link a link; a link to nothing or to a directory is
 * refused. */
static void test_output_symlink_kept(void **state) {
  fixture *fx = *state;
  char real[PATH_BYTES], link[PATH_BYTES], dangling[PATH_BYTES],
      to_dir[PATH_BYTES];
  const char *in = test_data_path("fbank/speech.wav");
  snprintf(real, sizeof real, "%s/run1.npy", fx->out_dir);
  snprintf(link, sizeof link, "%s/latest.npy", fx->out_dir);
  test_write_file(real, "old", 3);
  assert_int_equal(symlink("run1.npy", link), 0);

  assert_int_equal(run_aural(fx, "encode", "-q", "-o", link, in, NULL), 0);
  struct stat st;
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  char target[PATH_BYTES];
  ssize_t n = readlink(link, target, sizeof target - 1);
  assert_int_equal(n, 8);
  target[n] = '\0';
  assert_string_equal(target, "run1.npy");
  float *rows;
  size_t n_rows, n_cols;
  char msg[PATH_BYTES + 64];
  assert_int_equal(npy_read_f32(real, &rows, &n_rows, &n_cols, msg,
                                sizeof msg), 0);
  assert_int_equal(n_rows, 108);
  free(rows);

  snprintf(dangling, sizeof dangling, "%s/dangling.npy", fx->out_dir);
  assert_int_equal(symlink("nowhere.npy", dangling), 0);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", dangling, in, NULL),
                   1);
  assert_contains(fx->err, dangling);
  assert_contains(fx->err, "link to nothing");
  assert_int_equal(lstat(dangling, &st), 0);
  assert_true(S_ISLNK(st.st_mode));

  snprintf(to_dir, sizeof to_dir, "%s/dir.npy", fx->out_dir);
  assert_int_equal(symlink(fx->in_dir, to_dir), 0);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", to_dir, in, NULL), 1);
  assert_contains(fx->err, "directory");
  assert_int_equal(lstat(to_dir, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_int_equal(lstat(dangling, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
}

/* -o a FIFO: the .npy goes through it to its reader, and the FIFO stays.
 * The reader opens first (non-blocking) and reads after the tool is done:
 * the output (14 KiB) fits in the pipe's buffer. */
static void test_output_fifo_written_through(void **state) {
  fixture *fx = *state;
  char fifo[PATH_BYTES], file[PATH_BYTES];
  const char *in = test_data_path("fbank/speech.wav");
  snprintf(fifo, sizeof fifo, "%s/pipe.npy", fx->out_dir);
  snprintf(file, sizeof file, "%s/file.npy", fx->out_dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int rd = open(fifo, O_RDONLY | O_NONBLOCK);
  assert_true(rd >= 0);

  int status = run_aural(fx, "encode", "-q", "-o", fifo, in, NULL);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 0);
  struct stat st;
  assert_int_equal(lstat(fifo, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));

  char *got = malloc(65536);
  assert_non_null(got);
  size_t len = 0;
  ssize_t n;
  while ((n = read(rd, got + len, 65536 - len)) > 0) len += (size_t)n;
  close(rd);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", file, in, NULL), 0);
  assert_same_bytes(file, got, len);
  assert_int_equal(len, NPY_HEADER_BYTES + 108 * 32 * 4);
  free(got);
}

/* -o a character device (a /dev/null made here: the real one must not be
 * at stake) writes to the device, which stays a device. */
static void test_output_char_device_written_through(void **state) {
  fixture *fx = *state;
  char null[PATH_BYTES];
  snprintf(null, sizeof null, "%s/null", fx->out_dir);
  if (mknod(null, S_IFCHR | 0666, makedev(1, 3)) < 0) {
    print_message("    mknod: %s (not root?)\n", strerror(errno));
    skip();
  }
  int status = run_aural(fx, "encode", "-q", "-o", null,
                         test_data_path("fbank/speech.wav"), NULL);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 0);
  struct stat st;
  assert_int_equal(lstat(null, &st), 0);
  assert_true(S_ISCHR(st.st_mode));
  assert_true(st.st_rdev == (dev_t)makedev(1, 3));
  assert_dir_holds(fx->out_dir, "null");
}

/* Output to a device or a FIFO waits in a spool file in $TMPDIR until the
 * end. When that file cannot grow (a full /tmp; here a file size limit),
 * the message says where it was: "/dev/null: write failed: No space left
 * on device" alone sent the user to look at /dev/null. */
static void test_output_spool_failure_named(void **state) {
  fixture *fx = *state;
  enum { N_FRAMES = 16000 * 10 }; /* 1000 rows of 80 features: 320 kB */
  char in[PATH_BYTES];
  input_path(in, fx, "ten.wav");
  uint8_t *b = malloc(44 + 2 * (size_t)N_FRAMES);
  assert_non_null(b);
  wav_header(b, WAV_PCM, 1, 16000, 16, 2u * N_FRAMES);
  fill_pcm16(b + 44, N_FRAMES);
  test_write_file(in, b, 44 + 2 * (size_t)N_FRAMES);
  free(b);

  const char *old_tmp = getenv("TMPDIR");
  char *saved_tmp = old_tmp ? strdup(old_tmp) : NULL;
  assert_int_equal(setenv("TMPDIR", fx->out_dir, 1), 0);
  void (*old_xfsz)(int) = signal(SIGXFSZ, SIG_IGN); /* EFBIG instead */
  struct rlimit old_lim, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
  lim = old_lim;
  lim.rlim_cur = 64 * 1024;
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  pid_t pid = spawn_aural(fx, (const char *const[]){"encode", "-q", "--output",
                                                    "features", "-o",
                                                    "/dev/null", in, NULL});
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_lim), 0);
  signal(SIGXFSZ, old_xfsz);
  if (saved_tmp != NULL)
    setenv("TMPDIR", saved_tmp, 1);
  else
    unsetenv("TMPDIR");
  free(saved_tmp);

  int status = wait_aural(fx, pid);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 1);
  assert_contains(fx->err, "/dev/null: write failed");
  assert_contains(fx->err, "spool");
  assert_contains(fx->err, fx->out_dir);
  assert_dir_holds(fx->out_dir, NULL);
}

/* kill -9 while -o is being written leaves nothing in the directory: the
 * output is written to a file without a name until it is complete. */
static void test_kill9_leaves_no_temp_file(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], out[PATH_BYTES];
  input_path(in, fx, "live.wav");
  snprintf(out, sizeof out, "%s/out.npy", fx->out_dir);
  const char *args[] = {"encode", "-q", "-o", out, in, NULL};
  pid_t pid;
  int busy;
  int fd = start_live_encode(fx, in, args, &pid, &busy);
  assert_int_equal(kill(pid, SIGKILL), 0);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  close(fd);
  assert_true(busy);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  assert_dir_holds(fx->out_dir, NULL);
}

/* Starts `aural encode -q -o OUT_DIR/out.npy IN` on a new FIFO IN (named
 * name) without a writer; *said: whether it said on stderr, within 2 s,
 * that it waits for one. */
static pid_t spawn_fifo_waiter(fixture *fx, const char *name, char *in,
                               int *said) {
  char out[PATH_BYTES], err_path[PATH_BYTES];
  input_path(in, fx, name);
  snprintf(out, sizeof out, "%s/out.npy", fx->out_dir);
  snprintf(err_path, sizeof err_path, "%s/stderr.txt", fx->root);
  assert_int_equal(mkfifo(in, 0600), 0);
  const char *args[] = {"encode", "-q", "-o", out, in, NULL};
  pid_t pid = spawn_aural(fx, args);
  *said = 0;
  for (int i = 0; i < 200 && !*said; i++) {
    sleep_ms(10);
    char *err = read_text(err_path);
    *said = strstr(err, "waiting for a writer") != NULL;
    free(err);
  }
  return pid;
}

/* A FIFO input without a writer: the tool says what it waits for (even
 * with -q: a silent hang is what it must not do), then reads the audio
 * once a writer comes. */
static void test_encode_fifo_says_it_waits(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES];
  int said;
  pid_t pid = spawn_fifo_waiter(fx, "later.wav", in, &said);
  size_t len;
  char *wav = test_read_file(test_data_path("fbank/speech.wav"), &len);
  void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
  int fd = open(in, O_WRONLY); /* the tool is waiting in its open */
  assert_true(fd >= 0);
  ssize_t wrote = write(fd, wav, len);
  close(fd);
  signal(SIGPIPE, old_pipe);
  free(wav);
  int status = wait_aural(fx, pid);
  print_message("    exit %d: %s", status, fx->err);
  if (!said) fail_msg("nothing on stderr within 2 s: '%s'", fx->err);
  assert_int_equal(wrote, (ssize_t)len);
  assert_contains(fx->err, "waiting for a writer on FIFO");
  assert_contains(fx->err, in);
  assert_int_equal(status, 0);
  assert_dir_holds(fx->out_dir, "out.npy");
}

/* Ctrl-C while the tool waits for a writer on a FIFO input: the usual
 * exit 130 and its usual words, not the open's "Interrupted system
 * call". */
static void test_encode_fifo_wait_interrupted(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES];
  int said;
  pid_t pid = spawn_fifo_waiter(fx, "never.wav", in, &said);
  assert_int_equal(kill(pid, SIGINT), 0);
  int status = wait_aural(fx, pid);
  print_message("    exit %d: %s", status, fx->err);
  assert_true(said);
  assert_int_equal(status, 130);
  assert_contains(fx->err, "interrupted; nothing written");
  assert_null(strstr(fx->err, "Interrupted system call"));
  assert_dir_holds(fx->out_dir, NULL);
}

/* -q with several inputs (-j) prints nothing at all, like -q with one. */
static void test_encode_batch_quiet(void **state) {
  fixture *fx = *state;
  char a[PATH_BYTES], b[PATH_BYTES], out[PATH_BYTES];
  size_t len;
  input_path(a, fx, "a.wav");
  input_path(b, fx, "b.wav");
  free(copy_speech(a, &len));
  free(copy_speech(b, &len));
  snprintf(out, sizeof out, "%s/batch", fx->out_dir);
  assert_int_equal(run_aural(fx, "encode", "-j", "2", "-q", "-o", out, a, b,
                             NULL),
                   0);
  assert_string_equal(fx->out, "");
  assert_string_equal(fx->err, "");
  struct stat st;
  assert_int_equal(stat(test_join(out, "a.npy"), &st), 0);
  assert_int_equal(stat(test_join(out, "b.npy"), &st), 0);
}

/* Starts argv (argv[0] the program) with stdin on /dev/null and stdout
 * and stderr on a new pseudo-terminal, whose master end it returns; the
 * child does not inherit fd close_fd (-1: none). Skips the test where
 * there is no pseudo-terminal. */
static int spawn_on_terminal(char *const *argv, int close_fd, pid_t *pid) {
  int master, slave;
  if (openpty(&master, &slave, NULL, NULL, NULL) != 0) {
    print_message("    openpty: %s (no /dev/pts?)\n", strerror(errno));
    skip();
  }
  posix_spawn_file_actions_t fa;
  assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
  assert_int_equal(
      posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0), 0);
  assert_int_equal(posix_spawn_file_actions_adddup2(&fa, slave, 1), 0);
  assert_int_equal(posix_spawn_file_actions_adddup2(&fa, slave, 2), 0);
  assert_int_equal(posix_spawn_file_actions_addclose(&fa, slave), 0);
  assert_int_equal(posix_spawn_file_actions_addclose(&fa, master), 0);
  if (close_fd >= 0)
    assert_int_equal(posix_spawn_file_actions_addclose(&fa, close_fd), 0);
  int rc = posix_spawn(pid, argv[0], &fa, NULL, argv, environ);
  if (rc != 0) fail_msg("cannot run %s: %s", argv[0], strerror(rc));
  posix_spawn_file_actions_destroy(&fa);
  close(slave);
  return master;
}

/* Runs aural with args (NULL-terminated, without argv[0]) with stdout and
 * stderr on a pseudo-terminal, and returns its exit status; *screen gets
 * the lines as the terminal shows them (free it): a carriage return goes
 * back to the line's start, ESC [ K erases to its end. *percent tells
 * whether a '%' was written at all, even one erased later. The first line
 * that holds cue (unless NULL) has a byte written to cue_fd as it comes,
 * for a test whose next step waits for it. */
static int run_on_terminal(const char *const *args, char **screen,
                           int *percent, const char *cue, int cue_fd) {
  char *argv[MAX_ARGS + 2];
  argv[0] = (char *)aural_bin();
  size_t n = 0;
  for (; args[n] != NULL; n++) {
    assert_true(n < MAX_ARGS);
    argv[n + 1] = (char *)args[n];
  }
  argv[n + 1] = NULL;
  pid_t pid;
  int master = spawn_on_terminal(argv, -1, &pid);

  size_t cap = 65536, len = 0, line_len = 0, col = 0;
  char *out = malloc(cap), line[1024];
  assert_non_null(out);
  int esc = 0; /* bytes of an escape sequence seen */
  *percent = 0;
  for (;;) {
    char buf[4096];
    ssize_t got = read(master, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break; /* EIO once the tool has closed the terminal */
    for (ssize_t i = 0; i < got; i++) {
      char c = buf[i];
      if (c == '%') *percent = 1;
      if (esc == 1) {
        esc = c == '[' ? 2 : 0;
      } else if (esc == 2) {
        if (c == 'K') line_len = col;
        esc = 0;
      } else if (c == '\033') {
        esc = 1;
      } else if (c == '\r') {
        col = 0;
      } else if (c == '\n') {
        if (cue != NULL && memmem(line, line_len, cue, strlen(cue)) != NULL) {
          assert_int_equal(write(cue_fd, "", 1), 1);
          cue = NULL;
        }
        assert_true(len + line_len + 2 < cap);
        memcpy(out + len, line, line_len);
        len += line_len;
        out[len++] = '\n';
        line_len = col = 0;
      } else if (col < sizeof line) {
        line[col++] = c;
        if (col > line_len) line_len = col;
      }
    }
  }
  close(master);
  out[len] = '\0';
  *screen = out;
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/* On a terminal the text of each chunk goes on a line of its own, above the
 * progress line: it was printed after the progress line, on the same
 * line ("in.wav [####  ]  40%[   0.50 s] ..."). */
static void test_encode_text_lines_apart_from_progress(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], out[PATH_BYTES];
  size_t len;
  input_path(in, fx, "speech.wav");
  free(copy_speech(in, &len));
  snprintf(out, sizeof out, "%s/text.txt", fx->out_dir);
  const char *to_file[] = {"encode", "--output", "text", "-o", out, in, NULL};
  const char *to_stdout[] = {"encode", "--output", "text", in, NULL};
  const char *const *runs[] = {to_file, to_stdout};
  for (size_t r = 0; r < 2; r++) {
    char *screen;
    int percent;
    assert_int_equal(run_on_terminal(runs[r], &screen, &percent, NULL, -1),
                     0);
    print_message("    screen:\n%s", screen);
    assert_true(percent); /* the progress line was drawn */
    assert_contains(screen, "[   0.00 s]");
    assert_contains(screen, "[   0.50 s]");
    for (char *line = screen, *end; *line != '\0'; line = end + 1) {
      end = strchr(line, '\n');
      *end = '\0';
      if (strstr(line, " s]") != NULL && strchr(line, '%') != NULL)
        fail_msg("a chunk's text shares a line with the progress: '%s'",
                 line);
    }
    free(screen);
  }
  assert_dir_holds(fx->out_dir, "text.txt");
}

/* An input whose length is unknown (a recorder's WAV, data size
 * 0xFFFFFFFF, through a FIFO) has no fraction done: its progress line
 * says how much audio was read. It drew a full bar at "100%" from the
 * first read on. */
/* Forks a writer of the len bytes at bytes into the FIFO at path (the
 * child's copy of them): it writes the first `before` bytes, then, when
 * gate is not NULL, waits for a byte on the pipe gate (or its close, or
 * 20 s) before the rest. Returns its pid. */
static pid_t spawn_fifo_writer(const char *path, const char *bytes,
                               size_t len, size_t before, const int *gate) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid > 0) return pid;
  if (gate != NULL) close(gate[1]);
  int fd = open(path, O_WRONLY);
  for (size_t at = 0; fd >= 0 && at < len;) {
    if (at == before && gate != NULL) {
      struct pollfd p = {.fd = gate[0], .events = POLLIN};
      poll(&p, 1, 20000);
    }
    size_t upto = at < before ? before : len;
    ssize_t k = write(fd, bytes + at, upto - at);
    if (k <= 0) break;
    at += (size_t)k;
  }
  _exit(0);
}

static void test_encode_progress_of_unknown_length(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], fifo[PATH_BYTES], out[PATH_BYTES];
  size_t len;
  input_path(in, fx, "speech.wav");
  char *bytes = copy_speech(in, &len);
  char *data = memmem(bytes, len, "data", 4);
  assert_non_null(data);
  memset(data + 4, 0xff, 4);
  input_path(fifo, fx, "rec.fifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  pid_t pid = spawn_fifo_writer(fifo, bytes, len, len, NULL); /* recorder */
  snprintf(out, sizeof out, "%s/rec.npy", fx->out_dir);
  const char *args[] = {"encode", "-o", out, fifo, NULL};
  char *screen;
  int percent;
  int status = run_on_terminal(args, &screen, &percent, NULL, -1);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  print_message("    screen:\n%s", screen);
  free(screen);
  free(bytes);
  assert_int_equal(status, 0);
  assert_false(percent);
  assert_dir_holds(fx->out_dir, "rec.npy");
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* With -j, the progress bar counts a file being encoded for what has been
 * read of it: it stayed empty, with 0.00 h of audio and 0x real time,
 * until a file was done, which for a few long recordings is most of the
 * run. The input is a FIFO whose writer stops halfway through until the
 * bar has moved (or 10 s have passed). */
static void test_encode_batch_progress_within_a_file(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], fifo[PATH_BYTES];
  size_t len;
  input_path(in, fx, "speech.wav");
  char *bytes = copy_speech(in, &len);
  input_path(fifo, fx, "rec.wav");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int go[2];
  assert_int_equal(pipe(go), 0);
  /* Half the file, then the rest when told. */
  pid_t writer = spawn_fifo_writer(fifo, bytes, len, len / 2, go);
  close(go[0]);

  char *argv[] = {(char *)aural_bin(), "encode", "-j", "1", "-o",
                  fx->out_dir, fifo, NULL};
  pid_t pid;
  int master = spawn_on_terminal(argv, go[1], &pid);

  /* Read the terminal until a bar with a '#' shows while no file is
   * done. */
  char seen[8192];
  size_t n_seen = 0;
  int moved = 0;
  double deadline = mono_s() + 10;
  while (!moved && mono_s() < deadline) {
    struct pollfd p = {.fd = master, .events = POLLIN};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t got = read(master, seen + n_seen, sizeof seen - 1 - n_seen);
    if (got <= 0) break;
    n_seen += (size_t)got;
    seen[n_seen] = '\0';
    for (char *bar = strstr(seen, "[#"); bar != NULL && !moved;
         bar = strstr(bar + 1, "[#"))
      moved = strstr(bar, "0/1 files") != NULL;
    if (n_seen > sizeof seen / 2) { /* keep the tail */
      memmove(seen, seen + n_seen - 256, 256);
      n_seen = 256;
    }
  }
  assert_int_equal(write(go[1], "g", 1), 1); /* the rest of the file */
  close(go[1]);
  char drain[4096];
  while (read(master, drain, sizeof drain) > 0) {
  }
  close(master);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  waitpid(writer, NULL, 0);
  free(bytes);
  if (!moved) fail_msg("the bar did not move while the file was read");
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_dir_holds(fx->out_dir, "rec.npy");
}

/* An existing output that its owner made read-only (chmod 444) is not
 * replaced, as the shell's '>' would not write it: it was renamed over,
 * mode kept, with exit 0. As root every file may be written, so the tool
 * runs as nobody, in a directory it may write (where a rename would
 * succeed), with a copy of the model there: the test's own may lie where
 * nobody cannot read it (a checkout under /root), and the model is read
 * before the output is judged. A tool nobody cannot run is a skip. */
static void test_encode_read_only_output_kept(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], out[PATH_BYTES], err_path[PATH_BYTES];
  char model[PATH_BYTES];
  size_t len;
  input_path(in, fx, "speech.wav");
  free(copy_speech(in, &len));
  const char *test_model = getenv("AURAL_MODEL");
  assert_non_null(test_model);
  char *blob = test_read_file(test_model, &len);
  input_path(model, fx, "model.safetensors");
  test_write_file(model, blob, len);
  free(blob);
  snprintf(out, sizeof out, "%s/kept.npy", fx->out_dir);
  test_write_file(out, "precious", 8);
  assert_int_equal(chmod(out, 0444), 0);
  int as_nobody = geteuid() == 0;
  if (as_nobody) {
    assert_int_equal(chmod(fx->root, 0755), 0);
    assert_int_equal(chmod(fx->in_dir, 0755), 0);
    assert_int_equal(chmod(in, 0644), 0);
    assert_int_equal(chmod(model, 0644), 0);
    assert_int_equal(chmod(fx->out_dir, 0777), 0);
  }
  snprintf(err_path, sizeof err_path, "%s/stderr.txt", fx->root);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null = open("/dev/null", O_RDWR);
    if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
        dup2(fd, 2) < 0)
      _exit(98);
    if (as_nobody &&
        (setgroups(0, NULL) != 0 || setgid(65534) != 0 ||
         setuid(65534) != 0 || access(aural_bin(), X_OK) != 0))
      _exit(99);
    execl(aural_bin(), aural_bin(), "encode", "-q", "-m", model, "-o", out,
          in, (char *)NULL);
    _exit(as_nobody ? 99 : 98);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  /* 127: the loader could not reach the library as nobody. */
  if (WEXITSTATUS(status) == 99 ||
      (as_nobody && WEXITSTATUS(status) == 127)) {
    print_message("    cannot run the tool as nobody here\n");
    skip();
  }
  char *err = read_text(err_path);
  print_message("    exit %d: %s", WEXITSTATUS(status), err);
  assert_int_equal(WEXITSTATUS(status), 1);
  assert_contains(err, out);
  assert_contains(err, "Permission denied");
  free(err);
  char *kept = read_text(out);
  assert_string_equal(kept, "precious");
  free(kept);
}

/* INPUT - is standard input, as for aural send (it was "-: No such file or
 * directory"): a pipe or a redirected file gives the same output as the
 * file itself; an empty one is named in the error; with several inputs it
 * is refused, having no name for its output. */
static void test_encode_stdin_input(void **state) {
  fixture *fx = *state;
  char in[PATH_BYTES], from_file[PATH_BYTES], from_stdin[PATH_BYTES];
  char batch[PATH_BYTES];
  size_t len;
  input_path(in, fx, "speech.wav");
  char *bytes = copy_speech(in, &len);
  free(bytes);
  snprintf(from_file, sizeof from_file, "%s/file.npy", fx->out_dir);
  snprintf(from_stdin, sizeof from_stdin, "%s/stdin.npy", fx->out_dir);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", from_file, in, NULL),
                   0);
  fx->stdin_from = in;
  int status = run_aural(fx, "encode", "-q", "-o", from_stdin, "-", NULL);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 0);
  bytes = test_read_file(from_file, &len);
  assert_same_bytes(from_stdin, bytes, len);
  free(bytes);
  assert_true(unlink(from_stdin) == 0);

  fx->stdin_from = "/dev/null";
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", from_stdin, "-", NULL),
                   1);
  assert_contains(fx->err, "standard input");
  assert_contains(fx->err, "empty");
  snprintf(batch, sizeof batch, "%s/batch", fx->out_dir);
  assert_int_equal(run_aural(fx, "encode", "-q", "-o", batch, in, "-", NULL),
                   2);
  assert_contains(fx->err, "standard input");
  assert_dir_holds(fx->out_dir, "file.npy");
}

/* A directory's entries with audio names that cannot be read as files (a
 * symbolic link loop, a link to nothing, a FIFO) are failures named on
 * stderr, not silently left out: the exit status says that not all the
 * audio was encoded. The good file is still written. */
static void test_encode_batch_reports_unreadable_entries(void **state) {
  fixture *fx = *state;
  char good[PATH_BYTES], path[PATH_BYTES];
  size_t len;
  input_path(good, fx, "good.wav");
  free(copy_speech(good, &len));
  input_path(path, fx, "loop1.wav");
  assert_int_equal(symlink("loop2.wav", path), 0);
  input_path(path, fx, "loop2.wav");
  assert_int_equal(symlink("loop1.wav", path), 0);
  input_path(path, fx, "dangling.wav");
  assert_int_equal(symlink("nothing.wav", path), 0);
  input_path(path, fx, "fifo.wav");
  assert_int_equal(mkfifo(path, 0600), 0);
  input_path(path, fx, "notes.txt"); /* not audio by its name: ignored */
  test_write_file(path, "x", 1);

  int status = run_aural(fx, "encode", "-q", "-o", fx->out_dir, fx->in_dir,
                         NULL);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 1);
  assert_dir_holds(fx->out_dir, "good.npy");
  const char *named[] = {"loop1.wav", "loop2.wav", "dangling.wav",
                         "fifo.wav"};
  for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
    input_path(path, fx, named[i]);
    assert_contains(fx->err, path);
  }
  assert_contains(fx->err, "symbolic links");
  assert_contains(fx->err, "no such file");
  assert_contains(fx->err, "not a regular file");
  if (strstr(fx->err, "notes.txt") != NULL)
    fail_msg("a file without an audio name was reported: %s", fx->err);
}

/* Two inputs that would write one output are refused before any work, and
 * the message names both inputs and the output (-o DIR/ as well as -o
 * DIR). */
static void test_encode_batch_same_output_names_inputs(void **state) {
  fixture *fx = *state;
  char a[PATH_BYTES], b[PATH_BYTES], sub[PATH_BYTES], out[PATH_BYTES];
  size_t len;
  input_path(a, fx, "a.wav");
  free(copy_speech(a, &len));
  input_path(sub, fx, "sub");
  assert_int_equal(mkdir(sub, 0700), 0);
  input_path(b, fx, "sub/a.flac");
  free(copy_speech(b, &len));
  snprintf(out, sizeof out, "%s/", fx->out_dir);
  int status = run_aural(fx, "encode", "-q", "-o", out, a, b, NULL);
  print_message("    exit %d: %s", status, fx->err);
  assert_int_equal(status, 1);
  assert_contains(fx->err, a);
  assert_contains(fx->err, b);
  snprintf(out, sizeof out, "%s/a.npy", fx->out_dir);
  assert_contains(fx->err, out);
  assert_dir_holds(fx->out_dir, NULL);
}

/* Ctrl-C in the middle of several inputs: what was written stays, what was
 * being encoded is dropped, and the summary counts the files written, not
 * the files started. */
static void test_encode_batch_interrupted_summary(void **state) {
  fixture *fx = *state;
  char a[PATH_BYTES], live[PATH_BYTES], c[PATH_BYTES];
  size_t len;
  input_path(a, fx, "a.wav");
  input_path(live, fx, "live.wav");
  input_path(c, fx, "c.wav");
  free(copy_speech(a, &len));
  free(copy_speech(c, &len));
  void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
  /* One job: a.wav is written before the FIFO is opened. */
  const char *args[] = {"encode", "-j", "1", "-o", fx->out_dir, a, live, c,
                        NULL};
  pid_t pid;
  int busy;
  int fd = start_live_encode(fx, live, args, &pid, &busy);
  assert_int_equal(kill(pid, SIGINT), 0);
  uint8_t more[200] = {0};
  assert_int_equal(write(fd, more, sizeof more), (ssize_t)sizeof more);
  close(fd);
  int status = wait_aural(fx, pid);
  signal(SIGPIPE, old_pipe);
  print_message("    exit %d: %s%s", status, fx->out, fx->err);
  assert_true(busy);
  assert_int_equal(status, 130);
  assert_dir_holds(fx->out_dir, "a.npy");
  assert_contains(fx->out, "1 of 3 files written");
  assert_contains(fx->out, "interrupted");
  assert_contains(fx->out, "with 1 thread:"); /* not '1 threads' */
}

/* Ctrl-C while the workers of a batch wait for writers on FIFO inputs:
 * the batch ends (exit 130, nothing written), where the workers went on
 * waiting in their opens until a second Ctrl-C. */
static void test_encode_batch_fifo_waits_interrupted(void **state) {
  fixture *fx = *state;
  char a[PATH_BYTES], b[PATH_BYTES], err_path[PATH_BYTES];
  input_path(a, fx, "a.wav");
  input_path(b, fx, "b.wav");
  snprintf(err_path, sizeof err_path, "%s/stderr.txt", fx->root);
  assert_int_equal(mkfifo(a, 0600), 0);
  assert_int_equal(mkfifo(b, 0600), 0);
  const char *args[] = {"encode", "-j", "2", "-o", fx->out_dir, a, b, NULL};
  pid_t pid = spawn_aural(fx, args);
  int waiting = 0; /* both workers in their opens */
  for (int i = 0; i < 500 && waiting < 2; i++) {
    sleep_ms(10);
    char *err = read_text(err_path);
    waiting = (strstr(err, a) != NULL) + (strstr(err, b) != NULL);
    free(err);
  }
  assert_int_equal(kill(pid, SIGINT), 0);
  int ended = 0; /* within 10 s (left for wait_aural to reap) */
  for (int i = 0; i < 1000 && !ended; i++) {
    sleep_ms(10);
    siginfo_t si = {0};
    ended = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            si.si_pid == pid;
  }
  if (!ended) kill(pid, SIGKILL); /* wait_aural then fails on it */
  int status = wait_aural(fx, pid);
  print_message("    exit %d: %s%s", status, fx->out, fx->err);
  assert_int_equal(waiting, 2);
  assert_true(ended);
  assert_int_equal(status, 130);
  assert_contains(fx->out, "0 of 2 files written");
  assert_dir_holds(fx->out_dir, NULL);
}

/* With -j on a terminal, the notice that a worker waits for a writer on a
 * FIFO input came while the progress bar stood on the line, and was glued
 * to it ("[####....] 2/4 files, ... 140x real timeaural encode: waiting
 * for a writer on FIFO ..."). It has a line of its own; the writer comes
 * once the notice is on the screen (within 20 s, else the test fails). */
static void test_encode_batch_fifo_notice_apart_from_progress(void **state) {
  fixture *fx = *state;
  char a[PATH_BYTES], fifo[PATH_BYTES];
  size_t len;
  input_path(a, fx, "a.wav");
  char *bytes = copy_speech(a, &len);
  input_path(fifo, fx, "b.wav");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int cue[2];
  assert_int_equal(pipe2(cue, O_CLOEXEC), 0);
  pid_t writer = spawn_fifo_writer(fifo, bytes, len, 0, cue);
  close(cue[0]);
  const char *args[] = {"encode", "-j", "2", "-o", fx->out_dir, a, fifo,
                        NULL};
  char *screen;
  int percent;
  int status =
      run_on_terminal(args, &screen, &percent, "waiting for a writer", cue[1]);
  close(cue[1]);
  kill(writer, SIGKILL);
  waitpid(writer, NULL, 0);
  free(bytes);
  print_message("    screen:\n%s", screen);
  int noticed = 0;
  for (char *line = screen, *end; *line != '\0'; line = end + 1) {
    end = strchr(line, '\n');
    *end = '\0';
    if (strstr(line, "waiting for a writer") == NULL) continue;
    noticed = 1;
    if (strncmp(line, "aural encode: waiting", 21) != 0)
      fail_msg("the notice shares a line with the progress: '%s'", line);
  }
  free(screen);
  assert_int_equal(status, 0);
  assert_true(noticed);
  struct stat st;
  assert_int_equal(stat(test_join(fx->out_dir, "a.npy"), &st), 0);
  assert_int_equal(stat(test_join(fx->out_dir, "b.npy"), &st), 0);
}

/* aural sub checks -o before it connects: a directory is refused at once
 * (and not after a whole stream was received). */
static void test_sub_output_checked_first(void **state) {
  fixture *fx = *state;
  char sock[PATH_BYTES];
  snprintf(sock, sizeof sock, "%s/no.sock", fx->root);
  assert_int_equal(run_aural(fx, "sub", "-s", sock, "--stream", "x", "-o",
                             fx->out_dir, NULL),
                   1);
  assert_contains(fx->err, fx->out_dir);
  assert_contains(fx->err, "is a directory");
}

static void test_info(void **state) {
  fixture *fx = *state;
  assert_int_equal(run_aural(fx, "info", NULL), 0);
  assert_contains(fx->out, "d_model 32");
  assert_contains(fx->out, "per stream");
  assert_contains(fx->out, "MFLOP per frame");
  assert_contains(fx->out, "CTC head     10 tokens");
  /* No lexicon beside the model: the line says where info looks, not
   * options it does not take (it named --lexicon and --lm). */
  assert_contains(fx->out, "words        none (");
  assert_contains(fx->out, "beside the model");
  if (strstr(fx->out, "--lexicon") != NULL)
    fail_msg("aural info names an option it lacks:\n%s", fx->out);
  char model[PATH_BYTES];
  snprintf(model, sizeof model, "%s/empty.safetensors", fx->in_dir);
  test_write_file(model, "", 0);
  assert_int_equal(run_aural(fx, "info", model, NULL), 1);
  assert_contains(fx->err, "empty.safetensors");
  assert_contains(fx->err, "empty");
  /* Options that exclude each other are a bad command line (exit 2, as
   * aural(1) says), not a model that failed (it was 1). */
  assert_int_equal(run_aural(fx, "info", "--f16", "--precision", "bf16",
                             NULL),
                   2);
  assert_contains(fx->err, "--f16 and --precision bf16 exclude each other");
  /* -m MODEL, as every other command that takes a model (it was an
   * invalid option here alone); one model, by either way, at most. */
  const char *f16 = test_data_path("encoder/f16_head.safetensors");
  assert_int_equal(run_aural(fx, "info", "-m", f16, NULL), 0);
  assert_contains(fx->out, "f16_head.safetensors");
  assert_int_equal(run_aural(fx, "info", "--model", model, NULL), 1);
  assert_contains(fx->err, "empty.safetensors");
  assert_int_equal(run_aural(fx, "info", "-m", f16, model, NULL), 2);
  assert_contains(fx->err, "one MODEL");
}

/* aural load's bad command lines say what is wrong, naming the option as
 * typed (it said "-n must be 1..2000" for --streams) or the extra
 * argument (it printed the whole usage, and nothing about why). */
static void test_load_usage_errors(void **state) {
  fixture *fx = *state;
  assert_int_equal(run_aural(fx, "load", "--streams", "0", NULL), 2);
  assert_contains(fx->err, "--streams 0");
  assert_contains(fx->err, "1..2000");
  assert_int_equal(run_aural(fx, "load", "--seconds", "2x", NULL), 2);
  assert_contains(fx->err, "--seconds 2x");
  assert_int_equal(run_aural(fx, "load", "a.wav", "b.wav", NULL), 2);
  assert_contains(fx->err, "unexpected argument 'b.wav'");
  if (strstr(fx->err, "Usage") != NULL)
    fail_msg("the whole usage instead of the problem: %s", fx->err);
  /* Each block's latency is kept: the largest values together asked for
   * 414 GB. Refused before any connection (the socket is not there). */
  char sock[PATH_BYTES];
  snprintf(sock, sizeof sock, "%s/none.sock", fx->in_dir);
  assert_int_equal(run_aural(fx, "load", "-s", sock, "-n", "2000",
                             "--seconds", "86400", "--block-ms", "5", NULL),
                   2);
  assert_contains(fx->err, "2000 streams of 86400 s in blocks of 5 ms are "
                           "34560000000 blocks to time; at most 33554432");
  /* The bound as --help gives it: N x S x 1000 / B blocks. */
  assert_int_equal(run_aural(fx, "load", "-s", sock, "-n", "2000",
                             "--seconds", "16777", "--block-ms", "1000",
                             NULL),
                   1); /* 2000 x 16777 = 33554000: served, were aurald there */
  assert_int_equal(run_aural(fx, "load", "-s", sock, "-n", "2000",
                             "--seconds", "16778", "--block-ms", "1000",
                             NULL),
                   2); /* 33556000 */
  assert_int_equal(run_aural(fx, "load", "-s", sock, "-n", "2000",
                             "--seconds", "300", NULL),
                   1);
  assert_contains(fx->err, "none.sock");
}

/* aural bench -m measures a model file: its shape in the report, a clear
 * error for a missing one, and no mixing with the random model's flags.
 * --cpus N runs chunk mode on N threads at once as well. */
static void test_bench_model_file(void **state) {
  fixture *fx = *state;
  const char *model = test_data_path("encoder/f16_head.safetensors");
  assert_int_equal(run_aural(fx, "bench", "-m", model, "encoder", "--json",
                             "--seconds", "1", "--repeat", "1", "--cpus", "2",
                             NULL),
                   0);
  assert_contains(fx->out, "\"d_model\": 32");
  assert_contains(fx->out, "f16_head.safetensors\"");
  assert_contains(fx->out, "\"chunk_frames_per_s\"");
  const char *all = strstr(fx->out, "\"all_cpus\": ");
  assert_non_null(all);
  double fps = 0, gflops = 0, peak = -1, bf16_fps = 0;
  assert_int_equal(sscanf(all,
                          "\"all_cpus\": {\"cpus\": 2, \"chunk_frames_per_s\": "
                          "%lf, \"chunk_gflops\": %lf, \"peak_gflops\": %lf, "
                          "\"bf16_chunk_frames_per_s\": %lf",
                          &fps, &gflops, &peak, &bf16_fps),
                   4);
  assert_true(fps > 0 && gflops > 0 && peak >= 0 && bf16_fps > 0);
  assert_int_equal(run_aural(fx, "bench", "-m", model, "encoder", "--cpus",
                             "0", NULL),
                   2);
  assert_contains(fx->err, "--cpus");
  char missing[PATH_BYTES];
  snprintf(missing, sizeof missing, "%s/missing.safetensors", fx->in_dir);
  assert_int_equal(run_aural(fx, "bench", "-m", missing, "encoder", NULL), 1);
  assert_contains(fx->err, "missing.safetensors");
  assert_int_equal(
      run_aural(fx, "bench", "-m", model, "--layers", "2", "encoder", NULL), 2);
  assert_contains(fx->err, "model flags");
}

/* The random model's largest flags ask for 1.3 TB of weights: refused by
 * name before anything is built (the malloc for its file failed, and
 * aural bench exited 1 without a word). */
static void test_bench_model_too_large(void **state) {
  fixture *fx = *state;
  assert_int_equal(run_aural(fx, "bench", "--d-model", "8192", "--d-ff",
                             "65536", "--layers", "256", "encoder", NULL),
                   1);
  assert_contains(fx->err, "d_model 8192, d_ff 65536 and 256 layers need "
                           "1280.1 GiB of weights; the limit is 2.0 GiB");
}

/* --json prints one JSON object whatever the suites: with words and
 * another suite it printed two, a line each, which no JSON reader takes. */
static void test_bench_json_one_object(void **state) {
  fixture *fx = *state;
  const char *model = getenv("AURAL_DEFAULT_MODEL");
  const char *words = "{\"words\": {\"frames\": ";
  if (model == NULL) skip();
  char lexicon[PATH_BYTES], lm[PATH_BYTES];
  snprintf(lexicon, sizeof lexicon, "%s",
           test_data_path("words/sample.lexicon.txt"));
  snprintf(lm, sizeof lm, "%s", test_data_path("words/sample.lm.arpa"));
  assert_int_equal(run_aural(fx, "bench", "--json", "--seconds", "1",
                             "--repeat", "1", "-m", model, "--lexicon",
                             lexicon, "--lm", lm, "words", "frontend", NULL),
                   0);
  /* One line: the words' member first, then the frontend's. */
  size_t len = strlen(fx->out);
  assert_true(len > 2);
  assert_ptr_equal(strchr(fx->out, '\n'), fx->out + len - 1);
  assert_true(strncmp(fx->out, words, strlen(words)) == 0);
  assert_contains(fx->out, "}, \"frontend\": [{\"rate_hz\": 16000");
  assert_true(strcmp(fx->out + len - 4, "}]}\n") == 0);
  /* Alone, the words' object is as it was. */
  assert_int_equal(run_aural(fx, "bench", "--json", "--seconds", "1",
                             "--repeat", "1", "-m", model, "--lexicon",
                             lexicon, "--lm", lm, "words", NULL),
                   0);
  assert_true(strncmp(fx->out, words, strlen(words)) == 0);
  assert_true(strcmp(fx->out + strlen(fx->out) - 3, "}}\n") == 0);
}

/* A value out of an option's range is a bad command line that names the
 * range: "bad value '65' for --streams" left the user to guess the bound,
 * which --help does not give. */
static void test_bench_bad_values_name_the_range(void **state) {
  fixture *fx = *state;
  static const struct {
    const char *opt, *value, *want;
  } cases[] = {
      {"--streams", "65", "--streams 65: expected an integer in 1..64"},
      {"--seconds", "4000", "--seconds 4000: expected an integer in 1..3600"},
      {"--repeat", "0", "--repeat 0: expected an integer in 1..100"},
      {"--cpus", "x", "--cpus x: expected an integer in 1..1024"},
      {"--d-model", "1", "--d-model 1: expected an integer in 2..8192"},
      {"--chunk", "4097", "--chunk 4097: expected an integer in 1..4096"},
      {"--pos", "alibi", "--pos alibi: expected rope, sinusoidal or none"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    assert_int_equal(run_aural(fx, "bench", cases[i].opt, cases[i].value,
                               "encoder", NULL),
                     2);
    assert_contains(fx->err, cases[i].want);
    assert_string_equal(fx->out, "");
  }
}

/* An option that no suite run uses, or any but the model's with
 * --save-model (which measures nothing), is a bad command line naming it;
 * each was ignored, and the run measured something else than asked. */
static void test_bench_unused_options_refused(void **state) {
  fixture *fx = *state;
  const char *model = test_data_path("encoder/tiny.safetensors");
  static const struct {
    const char *args[4], *named, *needs;
  } cases[] = {
      {{"--beam", "3", "frontend"}, "--beam", "words suite"},
      {{"--lexicon", "x.txt"}, "--lexicon", "words suite"},
      {{"--lm", "x.arpa", "encoder"}, "--lm", "words suite"},
      {{"--d-model", "64", "frontend"}, "--d-model", "encoder suite"},
      {{"--cpus", "2", "words"}, "--cpus", "encoder suite"},
      {{"--model", "", "frontend"}, "--model", "encoder or words suite"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *const *a = cases[i].args;
    const char *m = a[1][0] == '\0' ? model : a[1];
    assert_int_equal(run_aural(fx, "bench", "--seconds", "1", "--repeat",
                               "1", a[0], m, a[2], a[3], NULL),
                     2);
    assert_contains(fx->err, cases[i].named);
    assert_contains(fx->err, cases[i].needs);
    assert_string_equal(fx->out, "");
  }
  char out[PATH_BYTES];
  snprintf(out, sizeof out, "%s/random.safetensors", fx->out_dir);
  assert_int_equal(run_aural(fx, "bench", "--save-model", out, "frontend",
                             NULL),
                   2);
  assert_contains(fx->err, "--save-model writes a model and measures "
                           "nothing: not with a SUITE such as frontend");
  assert_int_equal(run_aural(fx, "bench", "--json", "--save-model", out,
                             NULL),
                   2);
  assert_contains(fx->err, "not with --json");
  assert_int_equal(run_aural(fx, "bench", "--save-model", out, "--streams",
                             "2", NULL),
                   2);
  assert_contains(fx->err, "not with --streams");
  assert_dir_holds(fx->out_dir, NULL);
  /* The model's flags are what --save-model writes. */
  assert_int_equal(run_aural(fx, "bench", "--save-model", out, "--d-model",
                             "16", "--layers", "1", "--d-ff", "16", NULL),
                   0);
  assert_contains(fx->out, "d_model 16, 4 heads, d_ff 16, 1 layers");
  assert_dir_holds(fx->out_dir, "random.safetensors");
}

int main(void) {
  if (getenv("AURAL_BIN") == NULL || getenv("AURAL_TEST_DATA") == NULL) {
    fprintf(stderr, "test_cli: set AURAL_BIN and AURAL_TEST_DATA\n");
    return 1;
  }
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_help),
      T(test_help_fits_80_columns),
      T(test_usage_errors),
      T(test_bad_missing_file),
      T(test_bad_directory),
      T(test_bad_empty_file),
      T(test_bad_cut_inside_header),
      T(test_bad_truncated_data),
      T(test_bad_truncated_data_after_many_chunks),
      T(test_bad_text_renamed_wav),
      T(test_bad_nan),
      T(test_bad_infinity),
      T(test_bad_rate_zero),
      T(test_bad_rate_one),
      T(test_bad_rate_ten_million),
      T(test_bad_zero_channels),
      T(test_bad_hundred_thousand_channels),
      T(test_output_directory_missing),
      T(test_output_is_directory),
      T(test_sigint_leaves_nothing),
      T(test_second_sigint_quits_at_once),
      T(test_send_second_sigint_quits_at_once),
      T(test_send_sigterm_after_sigint_quits_at_once),
      T(test_sigterm_after_sigint_quits_at_once),
      T(test_goldens),
      T(test_summary_and_show),
      T(test_show_memory_bounded),
      T(test_bench_model_file),
      T(test_bench_model_too_large),
      T(test_bench_json_one_object),
      T(test_bench_bad_values_name_the_range),
      T(test_bench_unused_options_refused),
      T(test_load_usage_errors),
      T(test_encode_chunk_frames_invariance),
      T(test_encode_text_prints_chunks),
      T(test_encode_text_lines_apart_from_progress),
      T(test_encode_progress_of_unknown_length),
      T(test_encode_batch_progress_within_a_file),
      T(test_encode_read_only_output_kept),
      T(test_full_stdout_fails),
      T(test_closed_stdout_stays_apart),
      T(test_closed_stdout_result_fails),
      T(test_encode_dash_is_stdout),
      T(test_encode_bad_model),
      T(test_info),
      T(test_output_is_input_refused),
      T(test_output_keeps_its_mode),
      T(test_output_symlink_kept),
      T(test_output_fifo_written_through),
      T(test_output_char_device_written_through),
      T(test_output_spool_failure_named),
      T(test_kill9_leaves_no_temp_file),
      T(test_encode_fifo_says_it_waits),
      T(test_encode_batch_quiet),
      T(test_encode_stdin_input),
      T(test_encode_batch_reports_unreadable_entries),
      T(test_encode_batch_same_output_names_inputs),
      T(test_encode_batch_interrupted_summary),
      T(test_encode_fifo_wait_interrupted),
      T(test_encode_batch_fifo_waits_interrupted),
      T(test_encode_batch_fifo_notice_apart_from_progress),
      T(test_sub_output_checked_first),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
