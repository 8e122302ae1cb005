#!/usr/bin/env bash
# The architecture invariants of ARCHITECTURE.md, checked on the crate graph (`cargo tree`):
# exits 1 naming every edge that the layering forbids. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
# All dependencies (transitive, normal edges only: what a crate's library links) of a package.
deps_all() { cargo tree --locked -q -e normal -p "$1" --prefix none -f '{p}' | awk '{print $1}' | sort -u; }
# Its direct normal dependencies.
deps_direct() { cargo tree --locked -q -e normal -p "$1" --depth 1 --prefix none -f '{p}' | awk 'NR > 1 {print $1}' | sort -u; }

# Rule: package $1's dependencies (by $2: all or direct) include none of the names $3...
forbid() {
  local pkg=$1 how=$2 why=$3
  shift 3
  local have
  have=$("deps_$how" "$pkg")
  for bad in "$@"; do
    if grep -qx "$bad" <<<"$have"; then
      echo "layering: $pkg depends ($how) on $bad: $why" >&2
      fail=1
    fi
  done
}

# Rule: of nvstack's own crates, package $1 may depend only on the ones listed.
only_nvstack() {
  local pkg=$1
  shift
  local allowed=" $* " dep
  for dep in $(deps_all "$pkg" | grep '^nvstack' | grep -vx "$pkg"); do
    if [[ $allowed != *" $dep "* ]]; then
      echo "layering: $pkg depends on $dep (allowed: $*)" >&2
      fail=1
    fi
  done
}

members=$(cargo metadata --locked --no-deps --format-version 1 |
  python3 -c 'import json,sys; print("\n".join(p["name"] for p in json.load(sys.stdin)["packages"]))')
devices="nvstack-pmem nvstack-nvramdisk nvstack-nvcache nvstack-stack nvstack-export nvstack-crashtest nvstack-bench nvstack-sqlite nvstack-flash"

only_nvstack nvstack-core
only_nvstack nvstack-pmem nvstack-core
only_nvstack nvstack-nvramdisk nvstack-core nvstack-pmem
only_nvstack nvstack-nvcache nvstack-core nvstack-pmem nvstack-policy
only_nvstack nvstack-policy
only_nvstack nvstack-flash nvstack-core
# The stack opens any image; it sits on the devices and speaks no transport (the transports,
# in nvstack-export, may use it, never the reverse).
only_nvstack nvstack-stack nvstack-core nvstack-pmem nvstack-nvramdisk nvstack-nvcache nvstack-policy nvstack-flash
transports="fuser libublk io-uring nvstack-export"
# The transports and the daemon around them (nvstack-export) sit on the stack and below it: no
# simulator (the program wraps the device to record a trace), no lab, no checker.
only_nvstack nvstack-export nvstack-core nvstack-pmem nvstack-nvramdisk nvstack-nvcache nvstack-policy nvstack-flash nvstack-stack
forbid nvstack-stack all "the stack speaks no transport" $transports
# What embeds the stack in another program links no transport either.
for pkg in nvstack-sqlite nvstack-python; do
  forbid "$pkg" all "it opens images through the stack and links no transport" $transports
done
for pkg in nvstack-sim nvstack-policy nvstack-plot; do
  forbid "$pkg" all "the simulator, policies and plots run with no device" $devices
done
for pkg in $members; do
  [ "$pkg" = nvstack ] && continue
  forbid "$pkg" all "only the program parses arguments and draws progress" clap indicatif signal-hook
  [ "$pkg" = nvstack-export ] || forbid "$pkg" direct "only export speaks FUSE" fuser
  [ "$pkg" = nvstack-plot ] || forbid "$pkg" direct "only plot draws figures" plotters
done
# Inside nvcache: the two caches' trees import what they share from common/, never each
# other, and common/ imports neither.
for pair in "ubj:write" "write:ubj" "common:ubj" "common:write"; do
  from=${pair%%:*} to=${pair##*:}
  if hits=$(grep -rn "crate::$to\b" "crates/nvcache/src/$from" 2>/dev/null); then
    echo "layering: nvcache's $from/ imports $to/ (share through common/):" >&2
    echo "$hits" >&2
    fail=1
  fi
done
only_nvstack nvstack-mcsim nvstack-core
# The lab joins layers the graph keeps apart (the NVFAT replay, the flash replay, the recorded
# workloads); nvstack-plot comes with the simulator. It serves nothing and only the front ends
# (the program, Python, the bench) may use it.
only_nvstack nvstack-lab nvstack-core nvstack-pmem nvstack-nvramdisk nvstack-nvcache nvstack-flash nvstack-policy nvstack-sim nvstack-mcsim nvstack-plot
forbid nvstack-lab all "the lab runs experiments and serves nothing" fuser
for pkg in $members; do
  case $pkg in nvstack | nvstack-python | nvstack-bench | nvstack-lab) continue ;; esac
  forbid "$pkg" all "only the front ends use the lab" nvstack-lab
done
forbid nvstack-mcsim all "the committing simulator runs with no device" $devices
forbid nvstack direct "only export speaks FUSE" fuser
forbid nvstack direct "only plot draws figures" plotters
# The Python extension binds the simulator and the devices through the stack (nothing that
# exports or checks), and it alone speaks Python.
only_nvstack nvstack-python nvstack-core nvstack-policy nvstack-sim nvstack-plot nvstack-nvramdisk nvstack-pmem nvstack-stack nvstack-nvcache nvstack-flash
for pkg in $members; do
  [ "$pkg" = nvstack-python ] || forbid "$pkg" direct "only nvstack-python speaks Python" pyo3
done

# The program implements no device and no region: models and devices live in the libraries
# (the lab's engine takes core's MemDevice and pmem's Prefix).
if found=$(grep -rnE 'impl\b.*\b(BlockDevice|Region) for\b' crates/cli/src); then
  while IFS= read -r hit; do
    echo "layering: ${hit%%:impl*}: the program implements a device or a region (move it to a library crate)" >&2
  done <<<"$found"
  fail=1
fi

# Only the stack dispatches on an image's kind: outside the formats' own crates, no code names
# a format's magic; and the front ends (the program, the SQLite extension, Python) open and
# peek images only through the stack (creating one is the format's own call).
if found=$(grep -rnE '\b(layout::MAGIC|format::MAGIC|file::MAGIC)\b' crates/*/src sqlite-vfs/src |
  grep -vE '^crates/(stack|nvramdisk|nvcache|flash)/'); then
  echo "layering: an image's magic named outside the stack and its format (identify through nvstack_stack::kind):" >&2
  echo "$found" >&2
  fail=1
fi
# ...and no front end or transport names a kind of image to branch on it: a kind's facts are
# its impl in crates/stack/src/kinds/ (a new kind is a file there and one arm in Kind::ops).
if found=$(grep -rnE '\bKind::(Nvramdisk|Ubj|WriteCache|Flash)\b' crates/*/src sqlite-vfs/src |
  grep -vE '^crates/stack/' | grep -vE '/tests?(\.rs)?[:/]'); then
  echo "layering: a kind of image named outside the stack (ask the stack: Kind::is_cache, takes_run_settings, nvstack_stack::cache):" >&2
  echo "$found" >&2
  fail=1
fi
opens='\b(open_image|open_image_readonly|open_image_file)\(|(ubj|nvramdisk|write)::image::(open_readonly|peek|backing_of)\b|serve::backing_of\('
if found=$(grep -rnE "$opens" crates/cli/src sqlite-vfs/src crates/python/src); then
  echo "layering: a front end opens an image without the stack (nvstack_stack::Image, peek, served::open):" >&2
  echo "$found" >&2
  fail=1
fi

# Library errors name fields, not flags (core's Error::Invalid; the program maps a field to
# its flag): no command-line flag in the device layers' code outside their tests.
if found=$(python3 - crates/{core,pmem,nvramdisk,nvcache,flash,stack,export}/src <<'PY'
import os, re, sys
for src in sys.argv[1:]:
    for root, _, files in os.walk(src):
        if "/tests" in root[len(src):]:
            continue
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            path = os.path.join(root, f)
            text = open(path, encoding="utf-8").read().split("#[cfg(test)]")[0]
            for n, line in enumerate(text.splitlines(), 1):
                code = re.sub(r"//.*", "", line)
                if re.search(r"(^|[\s\"(`])--[a-z][a-z-]+", code):
                    print(f"{path}:{n}: {line.strip()}")
PY
); [ -n "$found" ]; then
  echo "layering: a library names a command-line flag (name the field: Error::invalid):" >&2
  echo "$found" >&2
  fail=1
fi

# No module import circles inside any crate (siblings that use each other: nest one under the
# other, or move what both use below both).
python3 scripts/module-circles.py crates/*/src sqlite-vfs/src >/dev/null || fail=1

if [ "$fail" -ne 0 ]; then
  echo "layering: the crate graph breaks the architecture invariants (ARCHITECTURE.md)" >&2
  exit 1
fi
echo "layering: $(wc -w <<<"$members") crates, every architecture invariant holds"
