#!/usr/bin/env bash
# Build docker/Dockerfile without a Docker engine and check the image from inside.
#
#   tools/image/build.sh [--out DIR] [--tag TAG] [--save FILE] [--no-verify]
#
# No registry can be pulled here, so the script first makes a local stand-in for the public
# python:3.11-slim-bookworm base: a Debian bookworm "minbase" root file system (debootstrap, from
# the Debian mirror apt already uses) with python3, venv and pip, imported as
# localhost/stream-dedupe-base:<recipe>. Its tarball is cached, so that step runs once per machine.
# The image is then built by buildah (chroot isolation, layer cache; overlay storage where the
# kernel allows it, else vfs) with --build-arg PYTHON_IMAGE=<local base>, and, unless --no-verify,
# checked from inside with `buildah run` (podman run needs CAP_SYS_RESOURCE, which this sandbox
# lacks): the default user, `stream-dedupe --help`, the worker's imports, the embedded demo, the
# HEALTHCHECK against a stub /healthz, no compilers.
# The results land in --out DIR (tests/test_image.py reads them).
#
# Everything lives under $SD_IMAGE_CACHE (default ~/.cache/stream-dedupe/image): the base tarball,
# the container storage (storage.conf: use it with CONTAINERS_STORAGE_CONF=... podman images), the
# pip download cache of the build. Needs root and `apt-get install podman buildah debootstrap`
# (`make tools` does it). Idempotent; concurrent runs wait for each other (flock).
# Environment: SD_IMAGE_CACHE, SD_IMAGE_STORAGE_DRIVER (auto|overlay|vfs), SD_IMAGE_MAX_STORAGE_GB
# (15: past it the storage is dropped), SD_DEBIAN_MIRROR (default: the one apt uses).

# The `sh -c '...'` scripts below expand their variables inside the image, on purpose:
# shellcheck disable=SC2016
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${SD_IMAGE_CACHE:-${HOME:-/root}/.cache/stream-dedupe/image}"
TAG="localhost/stream-dedupe:latest"
OUT=""
SAVE=""
VERIFY=1
BASE_RECIPE="bookworm-r1"   # bump when the base recipe below changes: a new tarball and tag follow
BASE_TAG="localhost/stream-dedupe-base:${BASE_RECIPE}"
BASE_TAR="$CACHE/base/debian-${BASE_RECIPE}-python3.tar"
MAX_STORAGE_GB="${SD_IMAGE_MAX_STORAGE_GB:-15}"

die() { echo "tools/image/build.sh: error: $*" >&2; exit 1; }
say() { echo "[image] $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --out|--tag|--save)
            [ $# -ge 2 ] || die "$1 needs a value (see --help)"
            case "$1" in --out) OUT="$2" ;; --tag) TAG="$2" ;; --save) SAVE="$2" ;; esac
            shift 2 ;;
        --no-verify) VERIFY=0; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
OUT="${OUT:-$CACHE/verify}"

[ "$(id -u)" = 0 ] || die "run as root: debootstrap, overlay/vfs container storage and chroot isolation need it"
for tool in buildah podman debootstrap flock; do
    command -v "$tool" >/dev/null 2>&1 \
        || die "'$tool' is not installed: apt-get install podman buildah debootstrap (or run 'make tools')"
done

mkdir -p "$CACHE/base" "$CACHE/tmp" "$OUT"
exec 9>"$CACHE/lock"
flock 9

# Storage driver: overlay when the kernel lets us mount it here (layers are diffs: fast, small),
# else vfs (every layer and every build container is a full copy: slow and GBs of disk).
DRIVER="${SD_IMAGE_STORAGE_DRIVER:-auto}"
if [ "$DRIVER" = auto ]; then
    probe=$(mktemp -d "$CACHE/overlay-probe.XXXXXX")
    mkdir -p "$probe/l" "$probe/u" "$probe/w" "$probe/m"
    DRIVER=vfs
    if mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" 2>/dev/null; then
        umount "$probe/m"
        DRIVER=overlay
    fi
    rm -rf "$probe"
fi
case "$DRIVER" in overlay|vfs) ;; *) die "SD_IMAGE_STORAGE_DRIVER must be auto, overlay or vfs, not '$DRIVER'" ;; esac
STORAGE="$CACHE/storage-$DRIVER"

# One storage for every call (buildah and podman read the same file), away from the system's.
cat > "$CACHE/storage.conf" <<EOF
[storage]
driver = "$DRIVER"
graphroot = "$STORAGE"
runroot = "$CACHE/run-$DRIVER"
EOF
export CONTAINERS_STORAGE_CONF="$CACHE/storage.conf"
export BUILDAH_ISOLATION=chroot

# Old layers pile up (one set per source change; on vfs each is a full copy): start afresh past a limit.
if [ -d "$STORAGE" ]; then
    used_gb=$(( $(du -sxk "$STORAGE" | cut -f1) / 1024 / 1024 ))
    if [ "$used_gb" -ge "$MAX_STORAGE_GB" ]; then
        say "container storage uses ${used_gb} GB (>= SD_IMAGE_MAX_STORAGE_GB=$MAX_STORAGE_GB): starting afresh"
        buildah rm --all >/dev/null 2>&1 || true
        buildah rmi --all --force >/dev/null 2>&1 || true
        rm -rf --one-file-system "$STORAGE" "$CACHE/run-$DRIVER"
    fi
fi
mkdir -p "$CACHE/run-$DRIVER"

debian_mirror() {
    # The mirror apt already uses for bookworm (deb822 .sources or one-line .list files).
    local files=(/etc/apt/sources.list.d/*.sources) mirror=""
    if [ -e "${files[0]}" ]; then
        mirror=$(awk '/^URIs:/ {u=$2} /^Suites:/ {for (i = 2; i <= NF; i++) if ($i == "bookworm") {print u; exit}}' \
            "${files[@]}")
    fi
    if [ -z "$mirror" ]; then
        mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '
            $1 == "deb" {n = 2; if ($2 ~ /^\[/) while (n <= NF && $n !~ /\]$/) n++; if ($2 ~ /^\[/) n++;
                         if ($(n + 1) == "bookworm") {print $n; exit}}')
    fi
    echo "${SD_DEBIAN_MIRROR:-${mirror:-http://deb.debian.org/debian}}"
}

build_base_tarball() {
    local mirror rootfs
    mirror=$(debian_mirror)
    rootfs="$CACHE/base/rootfs.tmp"
    rm -rf --one-file-system "$rootfs"
    say "debootstrap bookworm (minbase + python3, venv, pip) from $mirror: about a minute, once per machine"
    if ! debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
            bookworm "$rootfs" "$mirror" > "$CACHE/base/debootstrap.log" 2>&1; then
        tail -n 20 "$CACHE/base/debootstrap.log" >&2
        for m in proc sys; do umount "$rootfs/$m" 2>/dev/null || true; done
        die "debootstrap failed (log: $CACHE/base/debootstrap.log); set SD_DEBIAN_MIRROR to a reachable Debian mirror"
    fi
    # pip in the build must trust the same TLS roots as this machine (e.g. a local egress proxy's CA).
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates >> "$CACHE/base/debootstrap.log" 2>&1
    fi
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log \
        "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old
    tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
        -C "$rootfs" -cf "$BASE_TAR.tmp" .
    mv "$BASE_TAR.tmp" "$BASE_TAR"
    rm -rf --one-file-system "$rootfs"
}

t0=$(date +%s)
if [ ! -s "$BASE_TAR" ]; then
    build_base_tarball
fi
if ! podman image exists "$BASE_TAG"; then
    say "importing $BASE_TAR as $BASE_TAG"
    podman import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'CMD ["python3"]' \
        "$BASE_TAR" "$BASE_TAG" >/dev/null || die "podman import of $BASE_TAR failed"
fi
t_base=$(date +%s)

# buildah keeps RUN --mount=type=cache directories under TMPDIR: keep them in the cache too.
export TMPDIR="$CACHE/tmp"
say "building $TAG from docker/Dockerfile (buildah, $DRIVER storage, chroot isolation, layer cache)"
stamp() { while IFS= read -r line; do printf '%(%T)T %s\n' -1 "$line"; done; }
if ! buildah bud --layers --format docker --isolation chroot --pull=never \
        --build-arg "PYTHON_IMAGE=$BASE_TAG" -f "$REPO/docker/Dockerfile" -t "$TAG" "$REPO" 2>&1 \
        | stamp > "$OUT/build.log"; then
    tail -n 40 "$OUT/build.log" >&2
    die "buildah bud failed (full log: $OUT/build.log)"
fi
t_build=$(date +%s)
buildah inspect --type image "$TAG" > "$OUT/inspect.json"
image_id=$(buildah images --noheading --no-trunc --format '{{.ID}}' "$TAG" | head -n 1)
# Uncompressed size of the image's layers (what `podman images` shows as SIZE), in bytes.
image_bytes=$(podman image inspect --format '{{.Size}}' "$TAG")
printf '%s\n' "tag=$TAG" "id=$image_id" "size_bytes=$image_bytes" "storage_conf=$CACHE/storage.conf" "storage=$STORAGE" "driver=$DRIVER" \
    "base=$BASE_TAG" "base_seconds=$((t_base - t0))" "build_seconds=$((t_build - t_base))" > "$OUT/image.txt"

if [ "$VERIFY" = 1 ]; then
    # Leftovers of an interrupted run (the lock is ours, nobody else uses them).
    buildah containers --noheading --format '{{.ContainerName}}' | grep '^sd-image-verify-' \
        | xargs -r buildah rm >/dev/null 2>&1 || true
    ctr=$(buildah from --pull=never --name "sd-image-verify-$$" "$TAG")
    trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
    # No --user: every command runs as the image's configured user.
    # buildah's chroot isolation runs a sealed in-memory copy of itself; sealing it failed once with
    # EBUSY ("Close_Fd sealing memfd copy: Device or resource busy", CI 2026-12-07): that is the
    # runtime before the command starts, not the command, so such a run is tried once more.
    inside() {
        local err rc=0
        err=$(mktemp)
        buildah run --isolation chroot "$ctr" -- "$@" 2>"$err" || rc=$?
        if [ "$rc" -ne 0 ] && grep -q "sealing memfd" "$err"; then
            cat "$err" >&2
            say "buildah run could not start the command (sealing its own copy); trying once more" >&2
            rc=0
            buildah run --isolation chroot "$ctr" -- "$@" 2>"$err" || rc=$?
        fi
        cat "$err" >&2
        rm -f "$err"
        return "$rc"
    }

    say "verifying inside the image: user, --help, demo, healthcheck, compilers"
    inside id -u > "$OUT/uid.txt" || die "cannot run commands in the image (buildah run)"
    inside stream-dedupe --help > "$OUT/help.txt" || die "'stream-dedupe --help' failed in the image"
    inside python -c 'import aiokafka, faust, rocksdict, stream_dedupe.worker.app; print("ok")' > "$OUT/imports.txt" \
        || die "the worker's modules (faust, aiokafka, rocksdict) do not import in the image"
    inside mkdir -p /tmp/demo || die "cannot create /tmp/demo in the image"
    inside stream-dedupe dedupe /opt/stream-dedupe/examples/crawl-sample.jsonl --state /tmp/demo/state \
        --events /tmp/demo/events.jsonl --deduped /tmp/demo/deduped.jsonl --no-progress \
        > "$OUT/demo-summary.txt" 2>&1 || { cat "$OUT/demo-summary.txt" >&2; die "the demo failed in the image"; }
    inside cat /tmp/demo/events.jsonl > "$OUT/events.jsonl"
    inside cat /tmp/demo/deduped.jsonl > "$OUT/deduped.jsonl"
    # The sample is small enough for the pure kernels; run it again compiled (numba writes its cache
    # to NUMBA_CACHE_DIR, site-packages being read-only for the service user): the same events.
    inside env STREAM_DEDUPE_JIT=on stream-dedupe dedupe /opt/stream-dedupe/examples/crawl-sample.jsonl \
        --state /tmp/demo/state-jit --events /tmp/demo/events-jit.jsonl --no-progress \
        > "$OUT/demo-jit-summary.txt" 2>&1 || { cat "$OUT/demo-jit-summary.txt" >&2; die "the compiled demo failed in the image"; }
    inside cat /tmp/demo/events-jit.jsonl > "$OUT/events-jit.jsonl"
    inside sh -c 'find "$NUMBA_CACHE_DIR" -name "*.nbi" | wc -l' > "$OUT/numba-cache-index-files.txt"
    inside sh -c 'touch "$STREAM_DEDUPE_STATE_DIR/.w" && rm "$STREAM_DEDUPE_STATE_DIR/.w" && echo writable' \
        > "$OUT/state-dir.txt" 2>&1 || true
    inside sh -c 'for c in gcc cc c++ g++ clang as ld make; do command -v "$c" || true; done' > "$OUT/compilers.txt"
    # The runtime leaves out the `tools` extra: `tune` must say what to install (exit 2, one line).
    inside sh -c 'stream-dedupe tune /opt/stream-dedupe/examples/crawl-sample.jsonl --out /tmp/tune 2>&1; echo "rc=$?"' \
        > "$OUT/tune-without-tools.txt" || true

    # The HEALTHCHECK command as configured, against a stub /healthz on a free port, then with nothing listening.
    mapfile -d '' health < <(python3 -c '
import json, sys
test = json.load(open(sys.argv[1]))["Docker"]["config"]["Healthcheck"]["Test"]
assert test[0] == "CMD", test
sys.stdout.write("\0".join(test[1:]) + "\0")' "$OUT/inspect.json")
    [ "${#health[@]}" -gt 0 ] || die "the image has no exec-form HEALTHCHECK (HEALTHCHECK CMD [...])"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    stub='import http.server as h, os
class H(h.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404); self.end_headers()
    def log_message(self, *args): pass
h.HTTPServer(("127.0.0.1", int(os.environ["STREAM_DEDUPE_WEB_PORT"])), H).serve_forever()'
    {
        buildah run --isolation chroot --env "STREAM_DEDUPE_WEB_PORT=$port" "$ctr" -- sh -c '
            python -c "$0" & pid=$!
            for _ in $(seq 50); do python -c "import socket, os; socket.create_connection((\"127.0.0.1\", int(os.environ[\"STREAM_DEDUPE_WEB_PORT\"])))" 2>/dev/null && break; sleep 0.1; done
            "$@" >/dev/null 2>&1; rc=$?; kill $pid; echo "serving rc=$rc"' "$stub" "${health[@]}"
        buildah run --isolation chroot --env "STREAM_DEDUPE_WEB_PORT=$port" "$ctr" -- sh -c \
            '"$@" >/dev/null 2>&1; echo "down rc=$?"' sh "${health[@]}"
    } > "$OUT/healthcheck.txt"
    grep -q '^serving rc=0$' "$OUT/healthcheck.txt" || die "the HEALTHCHECK failed against a serving /healthz"
    if grep -q '^down rc=0$' "$OUT/healthcheck.txt"; then
        die "the HEALTHCHECK passed with nothing listening"
    fi
    if [ -s "$OUT/compilers.txt" ]; then
        die "compilers in the final image: $(tr '\n' ' ' < "$OUT/compilers.txt")"
    fi
fi

if [ -n "$SAVE" ]; then
    podman save --format docker-archive -o "$SAVE" "$TAG" || die "podman save to $SAVE failed"
    say "saved $TAG to $SAVE (docker load -i / podman load -i)"
fi
say "done in $(( $(date +%s) - t0 )) s (base $((t_base - t0)) s, build $((t_build - t_base)) s)"
say "image $TAG ($image_id) is in $STORAGE ($DRIVER storage);"
say "use it with: CONTAINERS_STORAGE_CONF=$CACHE/storage.conf podman images   (or buildah ...)"
say "verification outputs: $OUT"
