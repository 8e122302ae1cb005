# Sourced by run.sh and test.sh: make sure the tools the project needs are present.
# The machine ships the rustup toolchain (cargo, clippy, rustfmt); system packages come from
# Debian's archive when missing.
need_pkgs=()
command -v flock >/dev/null 2>&1 || need_pkgs+=(util-linux)
command -v cc >/dev/null 2>&1 || need_pkgs+=(build-essential)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
  else
    echo "missing packages: ${need_pkgs[*]} (run as root, or install them)" >&2
    exit 3
  fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  [ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: this project needs the Rust toolchain (rustup, stable >= 1.89)" >&2
  exit 3
fi
if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
  echo "/dev/shm is missing or not writable: nvstack emulates NVRAM with files there" >&2
  exit 3
fi
