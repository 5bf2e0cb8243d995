#!/usr/bin/env sh
# Print the first Python interpreter this project can be set up with: CPython 3.11 to 3.13
# (the project needs >= 3.11; torch 2.13, the pinned CPU build, ships wheels for these).
# $PYTHON, if set, is checked first. With none found, say what is missing and exit 1.
set -u
lo=11
hi=13
ok() {
  command -v "$1" >/dev/null 2>&1 &&
    "$1" -c "import sys; sys.exit(not (3, $lo) <= sys.version_info[:2] <= (3, $hi))" >/dev/null 2>&1
}
for candidate in ${PYTHON:-} python3.11 python3.12 python3.13 python3 python; do
  if ok "$candidate"; then
    command -v "$candidate"
    exit 0
  fi
done
{
  echo "No suitable Python found: this project needs CPython 3.$lo to 3.$hi (tried: ${PYTHON:-} python3.11 python3.12 python3.13 python3 python)."
  for c in python3 python; do
    command -v "$c" >/dev/null 2>&1 && echo "  $c is $("$c" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)"
  done
  echo "Install one (e.g. 'apt-get install python3.11 python3.11-venv', 'pyenv install 3.11', 'uv python install 3.11'),"
  echo "or name it: make run PYTHON=/path/to/python3.12"
} >&2
exit 1
