# Sourced by run.sh and test.sh: make sure the tools the project needs are present.
# The machine ships the rustup toolchain (cargo, clippy, rustfmt); system packages come from
# Debian's archive when missing.
need_pkgs=()
command -v flock >/dev/null 2>&1 || need_pkgs+=(util-linux)
command -v cc >/dev/null 2>&1 || need_pkgs+=(build-essential)
# cmake builds DRAMsim3 and make and g++ DRAMSim2, the peers of scripts/bench-mcsim.sh (on
# demand; no test builds them).
command -v cmake >/dev/null 2>&1 || need_pkgs+=(cmake)
# The whole-stack tests (crates/cli/tests/serve.rs, sqlite-vfs/tests/sqlite_vfs.rs) use the real kernel file systems,
# SQLite and fio: FUSE, loop devices, e2fsprogs, xfsprogs, the sqlite3 CLI, Debian's python3
# (its sqlite3 module can load extensions).
command -v fusermount3 >/dev/null 2>&1 || need_pkgs+=(fuse3)
command -v mkfs.ext4 >/dev/null 2>&1 || need_pkgs+=(e2fsprogs)
command -v mkfs.xfs >/dev/null 2>&1 || need_pkgs+=(xfsprogs)
command -v losetup >/dev/null 2>&1 || need_pkgs+=(mount)
command -v fio >/dev/null 2>&1 || need_pkgs+=(fio)
# The write cache's FAT-aware admission is tested on real FAT volumes (crates/cli/tests/wcache.rs).
command -v mkfs.fat >/dev/null 2>&1 || need_pkgs+=(dosfstools)
command -v mcopy >/dev/null 2>&1 || need_pkgs+=(mtools)
# PostMark (Debian's postmark): a workload of scripts/bench-ubj.sh.
command -v postmark >/dev/null 2>&1 || need_pkgs+=(postmark)
# fusefat (Debian's, 0.1a, FUSE 2): a FAT volume driven from user space for the NVFAT
# recording (scripts/nvfat-record.sh, crates/cli/tests/sim_nvfat.rs); fusermount comes with it.
command -v fusefat >/dev/null 2>&1 || need_pkgs+=(fusefat)
command -v sqlite3 >/dev/null 2>&1 || need_pkgs+=(sqlite3)
[ -e /usr/lib/x86_64-linux-gnu/libsqlite3.so ] || [ -e /usr/lib/libsqlite3.so ] || need_pkgs+=(libsqlite3-dev)
[ -x /usr/bin/python3 ] || need_pkgs+=(python3)
# PMDK's libpmemblk (a user-space Linux BTT): the peer `nvstack bench` loads at run time
# (crates/bench/src/pmemblk.rs, dlopen); without it the peer rows are skipped, never faked.
[ -e /usr/lib/x86_64-linux-gnu/libpmemblk.so.1 ] || need_pkgs+=(libpmemblk-dev)
# python3-venv: the libCacheSim venv below (crates/cli/tests/sim_libcachesim.rs, scripts/bench-sim.sh).
/usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || need_pkgs+=(python3-venv)
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
# libCacheSim (PyPI `libcachesim`), the reference LRU of crates/cli/tests/sim_libcachesim.rs and
# scripts/bench-sim.sh: a venv under target/, made once. If it cannot be made, warn: that test
# then fails naming what is missing (it never passes without the comparison); the rest runs.
lcs_venv="$PWD/target/venv-libcachesim"
if ! "$lcs_venv/bin/python" -c 'import libcachesim' >/dev/null 2>&1; then
  rm -rf "$lcs_venv"
  if ! { /usr/bin/python3 -m venv "$lcs_venv" &&
    "$lcs_venv/bin/pip" install -q --disable-pip-version-check 'libcachesim==0.3.5'; }; then
    echo "warning: could not install libcachesim into $lcs_venv: crates/cli/tests/sim_libcachesim.rs will fail (it needs libcachesim)" >&2
    rm -rf "$lcs_venv"
  fi
fi
# The Python package (python/, crates/python): a venv of Debian's python3 under target/ with
# maturin (builds the wheel), NumPy, pandas, tqdm, Dask's distributed scheduler and pytest,
# made once; scripts/test.sh installs nvstack into it with pip and runs python/tests. If it
# cannot be made, warn: scripts/test.sh then fails the Python tests, naming the venv.
py_venv="$PWD/target/venv-python"
py_pkgs=('maturin==1.16.0' 'numpy==2.4.6' 'pandas==3.1.1' 'tqdm==4.70.1' 'dask[distributed]==2026.8.0' 'pytest==9.2.0')
if ! "$py_venv/bin/python" -c 'import maturin, numpy, pandas, tqdm, distributed, pytest' >/dev/null 2>&1; then
  rm -rf "$py_venv"
  if ! { /usr/bin/python3 -m venv "$py_venv" &&
    "$py_venv/bin/pip" install -q --disable-pip-version-check "${py_pkgs[@]}"; }; then
    echo "warning: could not make $py_venv: the Python package's tests will fail" >&2
    rm -rf "$py_venv"
  fi
fi
