# Sourced by scripts/setup.sh and scripts/compat.sh (which define `say`).
# Packages go in with uv (from PyPI, into .venv) where it installs: from its cache a fresh
# checkout's .venv takes seconds instead of pip's ~9 min (pyspark alone is ~400 MB unpacked);
# pip does it where uv cannot.
# uv tries its cache alone first (--offline: ~5 s on a machine that installed them before,
# against ~75 s of asking PyPI about every package again); what the cache lacks (a fresh
# machine) makes that fail, and the install goes to PyPI.
pyinstall() {
  local venv=$1; shift
  if [ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q uv >/dev/null 2>&1; then
    UV_LINK_MODE=${UV_LINK_MODE:-hardlink} .venv/bin/uv pip install -q --offline --python "$venv/bin/python" "$@" \
      >/dev/null 2>&1 && return
    UV_LINK_MODE=${UV_LINK_MODE:-hardlink} .venv/bin/uv pip install -q --python "$venv/bin/python" "$@" && return
    say "uv could not install into $venv; trying pip"
  fi
  "$venv/bin/pip" install -q --upgrade pip && "$venv/bin/pip" install -q "$@"
}

