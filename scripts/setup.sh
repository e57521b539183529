#!/usr/bin/env bash
# Installs the Debian packages castor needs (idempotent: skips what is installed).
set -euo pipefail

packages=(
  build-essential cmake ccache pkg-config
  libcaf-dev libcaf-doc           # actors, remoting, TLS (CAF 0.17)
  libtorch-dev                    # tensors, autograd, optimizers (libtorch 1.13)
  libopenblas0-pthread            # libtorch's BLAS: without it libblas.so.3 is the reference BLAS, and
                                  # matrix products (sgemm_) take 2/3 of a training run's CPU
  libboost-dev                    # misc utilities
  libboost-program-options-dev    # the command line and the apps' flags (Note [Flags])
  nlohmann-json3-dev              # cluster files, inspection output
  doctest-dev                     # tests
  clang libclang-rt-14-dev        # the fuzz test (libFuzzer, ASan, UBSan; tests/fuzz)
  libssl-dev openssl              # TLS: file checks, the test CA (scripts/make-certs.sh)
  zlib1g-dev                      # gzip'd IDX files of the data set
  dataset-fashion-mnist           # the training apps' data
  python3-torch                   # the PyTorch anchor in bench/ (never a runtime dependency)
  iproute2                        # tests/netns: three hosts as network namespaces (ip netns, veth, bridge)
  slurm-wlm munge                 # tests/slurm: a one-node Slurm cluster (slurmctld, slurmd, srun; munged
                                  # for its auth) that tests/slurm/slurm_test.sh starts itself in a temp dir
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
