#!/usr/bin/env bash
# Installs the real research-agent CLIs at pinned versions into the project-local folder .agents/
# (no global install, no root): npm packages under .agents/npm, aider in its own virtualenv
# .agents/aider (it pins its own dependency versions, which must not touch .venv).
# Usage: scripts/install_agents.sh                      all five
#        scripts/install_agents.sh claude codex aider   some of them
# Binaries land in .agents/bin/. Idempotent: an installed pinned version is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned: the versions these configs were run with (bump them together with conf/agent/*.yaml).
declare -A NPM=(
  [claude]="@anthropic-ai/claude-code@2.1.332"
  [codex]="@openai/codex@0.171.0"
  [opencode]="opencode-ai@1.18.33"
  [gemini]="@google/gemini-cli@0.61.0"
)
AIDER="aider-chat==0.86.2"

wanted=("$@")
[ ${#wanted[@]} -eq 0 ] && wanted=(claude codex aider opencode gemini)
mkdir -p .agents/bin

needs_npm=0
for name in "${wanted[@]}"; do [ -n "${NPM[$name]:-}" ] && needs_npm=1; done
if [ "$needs_npm" = 1 ]; then
  # The npm CLIs run on the system's Node.js, which the sandboxes see under /usr.
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "[agents] Node.js 20+ and npm are needed for the npm CLIs: apt-get install nodejs npm" >&2
    exit 2
  fi
  major=$(node -p 'process.versions.node.split(".")[0]')
  if [ "$major" -lt 20 ]; then
    echo "[agents] Node.js $(node --version) is too old for these CLIs: install Node.js 20 or newer" >&2
    exit 2
  fi
fi

# A registry's hiccup (a reset connection, a 5xx) fails one npm install in many: try three times
# before failing CI, and say what npm said each time rather than only where its log lies.
npm_install() {
  local try out
  for try in 1 2 3; do
    if out=$(npm install --prefix .agents/npm --no-fund --no-audit --loglevel=error "$1" 2>&1); then
      return 0
    fi
    echo "[agents] npm install $1 failed (try $try of 3):" >&2
    printf '%s\n' "$out" | tail -20 >&2
    [ "$try" -lt 3 ] && sleep $((try * 15))
  done
  echo "[agents] could not install $1 from the npm registry: check the network or the registry (npm config get registry), then rerun scripts/install_agents.sh" >&2
  return 1
}

for name in "${wanted[@]}"; do
  if [ "$name" = aider ]; then
    if ! .agents/aider/bin/python -m pip show aider-chat 2>/dev/null | grep -qx "Version: ${AIDER#*==}"; then
      echo "[agents] $AIDER (PyPI, .agents/aider)"
      "${PYTHON:-python3}" -m venv .agents/aider
      .agents/aider/bin/python -m pip install -q --upgrade pip
      .agents/aider/bin/python -m pip install -q "$AIDER"
    fi
    ln -sfn ../aider/bin/aider .agents/bin/aider
  elif [ -n "${NPM[$name]:-}" ]; then
    spec=${NPM[$name]}
    package=${spec%@*}
    if ! grep -qs "\"version\": \"${spec##*@}\"" ".agents/npm/node_modules/$package/package.json"; then
      echo "[agents] $spec (npm, .agents/npm)"
      npm_install "$spec"
    fi
    for bin in .agents/npm/node_modules/.bin/*; do
      ln -sfn "../npm/node_modules/.bin/$(basename "$bin")" ".agents/bin/$(basename "$bin")"
    done
  else
    echo "[agents] unknown agent '$name': choose from claude codex aider opencode gemini" >&2
    exit 2
  fi
done

for name in "${wanted[@]}"; do
  case $name in claude) bin=claude ;; codex) bin=codex ;; aider) bin=aider ;; opencode) bin=opencode ;; gemini) bin=gemini ;; esac
  printf '[agents] %-8s %s\n' "$bin" "$(".agents/bin/$bin" --version 2>&1 | head -1)"
done
