#!/usr/bin/env bash
# Offline batch throughput: 'aural encode -j JOBS' over a corpus of many
# speech files, reported as x real time (the summary line of aural encode).
#
#   tools/bench_offline.sh [-j JOBS] [-m MODEL] [--files N] [--corpus DIR]
#
# Defaults: JOBS = number of CPUs, MODEL = the random-weight 'base' model
# of 'aural bench' (d_model 256, 4 heads, d_ff 1024, 6 layers, W 50, rope),
# 600 files. The corpus is made once and reused: espeak-ng speech of two
# fortune sentences per file, 10 voices, 140-199 words per minute; half of
# the files FLAC at espeak's native 22.05 kHz (through the resampler), half
# WAV at 16 kHz; 14 s per file on average, 2.3 h in all. Installs what it
# needs (tools/setup.sh --reference).
set -euo pipefail
# Paths on the command line are the caller's, from where it was run.
caller=$PWD
cd "$(dirname "$0")/.."

jobs=$(nproc)
model=""
n_files=600
corpus=/tmp/aural-offline-corpus
out=""
model_tmp=""
tmp=""
trap 'rm -rf ${out:+"$out"} ${model_tmp:+"$model_tmp"} ${tmp:+"$tmp".wav "$tmp".flac}' EXIT
usage() { echo "bench_offline.sh: $1 (see --help)" >&2; exit 2; }
# A value that must follow an option: the next argument, which is there.
need() { [[ $# -ge 2 ]] || usage "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -j) need "$@"; jobs=$2; shift 2 ;;
    -m) need "$@"; model=$2; shift 2 ;;
    --files) need "$@"; n_files=$2; shift 2 ;;
    --corpus) need "$@"; corpus=$2; shift 2 ;;
    -h|--help)
      # The comment block above, without the interpreter line.
      sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
# Checked before anything is installed, built or generated.
[[ $jobs =~ ^[0-9]+$ ]] && ((10#$jobs >= 1)) ||
  usage "-j takes a whole number of 1 or more, not '$jobs'"
[[ $n_files =~ ^[0-9]+$ ]] && ((10#$n_files >= 1)) ||
  usage "--files takes a whole number of 1 or more, not '$n_files'"
n_files=$((10#$n_files))
[[ -n "$corpus" ]] || usage "--corpus needs a directory"
[[ -z "$model" || $model == /* ]] || model=$caller/$model
[[ $corpus == /* ]] || corpus=$caller/$corpus

tools/setup.sh --reference
TARGETS=tools/aural tools/build.sh build
aural=build/tools/aural

if [[ -z "$model" ]]; then
  model_tmp=$(mktemp --suffix=.safetensors)
  model=$model_tmp
  $aural bench --save-model "$model" >/dev/null
fi

# The corpus: one file per index, made only when missing, so an
# interrupted run resumes. Each appears under its name only when whole
# (written as .NAME.PID.*, then renamed), so that neither an interrupted
# run nor a second copy at the same time leaves a cut-off file that a
# later run would take as made; 'aural encode DIR' passes over names
# that start with a dot, so a copy that encodes while another still
# writes does not take its unfinished files either.
mkdir -p "$corpus"
# Sentences of 60-400 characters from a few fortune files, one per line.
fortunes=/usr/share/games/fortunes
mapfile -t sentences < <(cat "$fortunes"/{fortunes,literature,riddles,wisdom} |
  tr '\n' ' ' | sed 's/%/\n/g' | tr -s ' ' |
  awk 'length($0) > 60 && length($0) < 400' | head -n 2000)
if [[ ${#sentences[@]} -lt 100 ]]; then
  echo "bench_offline.sh: too few sentences in $fortunes" >&2
  exit 1
fi
voices=(en-us en-gb en-gb-scotland en-029 en-us+m3 en-us+f2 en-gb+m5
        en-gb+f3 en-us+klatt en-us+m7)
made=0
for ((i = 0; i < n_files; i++)); do
  name=$(printf 'utt%04d' "$i")
  [[ -f "$corpus/$name.wav" || -f "$corpus/$name.flac" ]] && continue
  # Two sentences make a file of several seconds.
  text="${sentences[$((3 * i % ${#sentences[@]}))]} ${sentences[$(((3 * i + 1) % ${#sentences[@]}))]}"
  voice=${voices[$((i % ${#voices[@]}))]}
  speed=$((140 + (i * 7) % 60))
  tmp=$corpus/.$name.$$
  if ((i % 2 == 0)); then
    espeak-ng -v "$voice" -s "$speed" -w "$tmp.wav" "$text"
    sox "$tmp.wav" "$tmp.flac"
    mv "$tmp.flac" "$corpus/$name.flac"
  else
    espeak-ng -v "$voice" -s "$speed" --stdout "$text" |
      sox -t wav - -r 16000 "$tmp.wav" vol 0.9
    mv "$tmp.wav" "$corpus/$name.wav"
  fi
  rm -f "$tmp.wav"
  made=$((made + 1))
  if ((made % 50 == 0)); then echo "bench_offline.sh: made $made files" >&2; fi
done

out=$(mktemp -d)
echo "model: $model; corpus: $corpus ($(ls "$corpus" | wc -l) files); jobs: $jobs"
$aural encode -m "$model" -j "$jobs" -o "$out" "$corpus"
