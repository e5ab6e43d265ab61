# Sourced by scripts/setup.sh and scripts/compat.sh (which define `say`).
# Packages go in with uv (from PyPI, into .venv) where it installs: from its cache a fresh
# checkout's .venv takes ~1.5 min instead of pip's ~9 (pyspark alone is ~400 MB unpacked);
# pip does it where uv cannot.
pyinstall() {
  local venv=$1; shift
  if [ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q uv >/dev/null 2>&1; then
    UV_LINK_MODE=${UV_LINK_MODE:-hardlink} .venv/bin/uv pip install -q --python "$venv/bin/python" "$@" && return
    say "uv could not install into $venv; trying pip"
  fi
  "$venv/bin/pip" install -q --upgrade pip && "$venv/bin/pip" install -q "$@"
}

