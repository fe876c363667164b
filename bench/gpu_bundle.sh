#!/usr/bin/env bash
# Packs what bench/gpu_check.sh runs into one file, for a GPU machine that cannot build
# kiln (LLVM 19, oneTBB, GoogleTest or Google Benchmark missing there): kiln_bench,
# examples/train and tests/test_gpu_runtime from BUILD_DIR, with every shared library
# they load, the dynamic loader and glibc included (so the machine's own versions do not
# matter), and a wrapper per program that starts it through the bundled loader. The
# CUDA driver (libcuda.so.1) and NVRTC still come from the GPU machine: kiln dlopens them.
#
# Usage: bench/gpu_bundle.sh [BUILD_DIR]     (default: build)
# Writes gpu-bundle/kiln-gpu.tar.xz (git-ignored; about 45 MB), e.g. to carry to the device
# machine; there, bench/gpu_check.sh finds it and runs from it when it cannot build. Beside it,
# gpu-bundle/fashion-mnist/ gets the first $GPU_TRAIN_SAMPLES (default 12800) Fashion-MNIST
# training images and the test set (about 10 MB), which gpu_check.sh's train step uses when
# the machine has no data set: bundle and data together fit the 64 MiB a device call carries
# (the whole data set does not). On this workplace's device tool, one call does the check:
#   run(command="bash bench/gpu_check.sh", carry=["gpu-bundle"])
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "$ROOT/${1:-build}" && pwd)"
programs=(bench/kiln_bench examples/train tests/test_gpu_runtime)
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/kiln-gpu/lib" "$stage/kiln-gpu/libexec" "$stage/kiln-gpu/bin"

for p in "${programs[@]}"; do
  [[ -x "$BUILD/$p" ]] || { echo "gpu_bundle: $BUILD/$p is missing (build it first)" >&2; exit 1; }
  cp "$BUILD/$p" "$stage/kiln-gpu/libexec/"
  # every library the program loads, resolved by this machine's loader (the loader itself too)
  ldd "$BUILD/$p" | awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' |
    while read -r lib; do cp -L -n "$lib" "$stage/kiln-gpu/lib/"; done
  name="$(basename "$p")"
  cat >"$stage/kiln-gpu/bin/$name" <<WRAP
#!/bin/sh
# Runs $name with the bundled loader and libraries (see bench/gpu_bundle.sh).
here="\$(cd "\$(dirname "\$0")/.." && pwd)"
exec "\$here/lib/ld-linux-x86-64.so.2" --library-path "\$here/lib" "\$here/libexec/$name" "\$@"
WRAP
  chmod +x "$stage/kiln-gpu/bin/$name"
done
git -C "$ROOT" rev-parse HEAD >"$stage/kiln-gpu/COMMIT" 2>/dev/null || echo unknown >"$stage/kiln-gpu/COMMIT"
mkdir -p "$ROOT/gpu-bundle"
tar -C "$stage" -cf - kiln-gpu | xz -T0 -6 >"$ROOT/gpu-bundle/kiln-gpu.tar.xz.tmp"
mv "$ROOT/gpu-bundle/kiln-gpu.tar.xz.tmp" "$ROOT/gpu-bundle/kiln-gpu.tar.xz"

# A slice of Fashion-MNIST for train on the GPU machine (IDX files, the count in the header cut).
python3 - "${KILN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}" "$ROOT/gpu-bundle/fashion-mnist" \
  "${GPU_TRAIN_SAMPLES:-12800}" <<'PY' || echo "gpu_bundle: no Fashion-MNIST slice (data set not found)"
import gzip, os, shutil, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
for name, header, item in [("train-images-idx3-ubyte", 16, 784), ("train-labels-idx1-ubyte", 8, 1)]:
    data = gzip.open(os.path.join(src, name + ".gz")).read()
    head = bytearray(data[:header])
    struct.pack_into(">I", head, 4, n)
    with gzip.open(os.path.join(dst, name + ".gz"), "wb") as f:
        f.write(bytes(head) + data[header:header + n * item])
for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
    shutil.copy(os.path.join(src, name), os.path.join(dst, name))
PY
echo "gpu_bundle: $(du -h "$ROOT/gpu-bundle/kiln-gpu.tar.xz" | cut -f1) in gpu-bundle/kiln-gpu.tar.xz ($(ls "$stage/kiln-gpu/lib" | wc -l) libraries, commit $(cut -c1-12 "$stage/kiln-gpu/COMMIT"))"
