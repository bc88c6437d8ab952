'use strict';
// Helpers shared by the action's main and post steps. Node built-ins only:
// the action must run without an npm install (runs.using: node24 gives
// global fetch, crypto and child_process).
const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { spawn, spawnSync } = require('child_process');

const REPO = 'vastrun/vastrun';
const DEFAULT_RELEASE_URL = `https://github.com/${REPO}/releases/download`;
// Keyless cosign certifies checksums.txt as signed by this repository's
// release workflow, run for the release's tag.
const cosignIdentity = (version) => `https://github.com/${REPO}/.github/workflows/release.yml@refs/tags/v${version}`;
const COSIGN_ISSUER = 'https://token.actions.githubusercontent.com';

function input(name, fallback = '') {
  const v = process.env[`INPUT_${name.replace(/ /g, '_').toUpperCase()}`];
  return v === undefined || v.trim() === '' ? fallback : v.trim();
}

function appendFile(file, text) {
  if (file) fs.appendFileSync(file, text);
}

// setOutput writes one output; main writes each documented output once.
function setOutput(name, value) {
  appendFile(process.env.GITHUB_OUTPUT, `${name}=${value}\n`);
}

function addPath(dir) {
  appendFile(process.env.GITHUB_PATH, `${dir}\n`);
}

function saveState(name, value) {
  appendFile(process.env.GITHUB_STATE, `${name}=${value}\n`);
}

// The post step sees state saved by main (and by vastrun itself, which
// writes instance_id, label and run_id the moment it rents) as STATE_name.
function getState(name) {
  return process.env[`STATE_${name}`] || '';
}

// stateLabels lists every label vastrun recorded for the post step: the
// latest run's (label) and each run's own (label_<run id>), so that
// several runs in one step each keep their cleanup handle.
function stateLabels(env = process.env) {
  const out = [];
  for (const [k, v] of Object.entries(env)) {
    if ((k === 'STATE_label' || k.startsWith('STATE_label_')) && v && !out.includes(v)) out.push(v);
  }
  return out.sort();
}

function mask(value) {
  if (value) process.stdout.write(`::add-mask::${value}\n`);
}

function onPath(cmd) {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() ? r.stdout.trim() : '';
}

function actionRoot() {
  return process.env.GITHUB_ACTION_PATH || path.join(__dirname, '..');
}

// ownVersion is the vastrun release this copy of the action installs: the
// version input, else the action's ref when it is an exact vX.Y.Z tag, else
// action/VERSION (bumped in every release commit, so a moving v1 tag or a
// commit SHA pin still gets the binary released with that commit).
function ownVersion() {
  const explicit = input('version');
  if (explicit) return explicit.replace(/^v/, '');
  const ref = process.env.GITHUB_ACTION_REF || '';
  if (/^v\d+\.\d+\.\d+$/.test(ref)) return ref.slice(1);
  return fs.readFileSync(path.join(actionRoot(), 'action', 'VERSION'), 'utf8').trim();
}

function platform() {
  const goos = { linux: 'linux', darwin: 'darwin' }[process.platform];
  const goarch = { x64: 'amd64', arm64: 'arm64' }[process.arch];
  if (!goos || !goarch) {
    throw new Error(`no vastrun release for ${process.platform}/${process.arch}; use install-mode: source (needs Go) or install-mode: path`);
  }
  return { goos, goarch };
}

async function download(url) {
  const res = await fetch(url, { redirect: 'follow' });
  if (res.status === 404) return null;
  if (!res.ok) throw new Error(`download ${url}: HTTP ${res.status}`);
  return Buffer.from(await res.arrayBuffer());
}

// checksumFor finds NAME's SHA-256 in a GoReleaser checksums.txt.
function checksumFor(text, name) {
  for (const line of text.split('\n')) {
    const m = line.trim().match(/^([0-9a-f]{64})\s+\*?(.+)$/);
    if (m && m[2] === name) return m[1];
  }
  return '';
}

function verifyCosign(dir, version, log) {
  const cosign = onPath('cosign');
  const bundle = path.join(dir, 'checksums.txt.sigstore.json');
  if (!cosign) {
    log('vastrun: cosign is not on PATH; checksums.txt is not signature-checked (SHA-256 verified)');
    return;
  }
  if (!fs.existsSync(bundle)) {
    log('::warning title=vastrun::this release publishes no cosign signature for checksums.txt; SHA-256 verified only');
    return;
  }
  const r = spawnSync(cosign, ['verify-blob', '--bundle', bundle,
    '--certificate-identity', cosignIdentity(version), '--certificate-oidc-issuer', COSIGN_ISSUER,
    path.join(dir, 'checksums.txt')], { encoding: 'utf8' });
  if (r.status !== 0) {
    throw new Error(`cosign refused the signature of checksums.txt: ${(r.stderr || r.stdout || '').trim()}`);
  }
  log('vastrun: cosign verified the signature of checksums.txt');
}

function verifyAttestation(file, log) {
  const mode = input('verify-attestation', 'auto');
  if (mode === 'false') return;
  const gh = onPath('gh');
  const token = process.env.GH_TOKEN || process.env.GITHUB_TOKEN;
  if (!gh || !token) {
    if (mode === 'true') throw new Error('verify-attestation: true needs gh on PATH and GH_TOKEN (or GITHUB_TOKEN) set');
    return;
  }
  const r = spawnSync(gh, ['attestation', 'verify', file, '--repo', REPO], { encoding: 'utf8', env: { ...process.env, GH_TOKEN: token } });
  if (r.status !== 0) throw new Error(`gh attestation verify refused ${path.basename(file)}: ${(r.stderr || r.stdout || '').trim()}`);
  log(`vastrun: gh verified the build attestation of ${path.basename(file)}`);
}

// installBinary downloads the release archive for this runner, verifies its
// SHA-256 against checksums.txt (and the cosign signature / attestation
// when the tools are there) and keeps it in the runner's tool cache, laid
// out as @actions/tool-cache does (NAME/VERSION/ARCH plus ARCH.complete).
// Nothing unverified is ever extracted, cached or run.
async function installBinary(opts = {}) {
  const log = opts.log || ((s) => process.stdout.write(`${s}\n`));
  const version = opts.version || ownVersion();
  const { goos, goarch } = opts.platform || platform();
  const base = (opts.releaseURL || input('release-url', DEFAULT_RELEASE_URL)).replace(/\/$/, '');
  const cacheRoot = opts.toolCache || process.env.RUNNER_TOOL_CACHE || path.join(os.tmpdir(), 'vastrun-tool-cache');
  const cacheDir = path.join(cacheRoot, 'vastrun', version, goarch);
  const bin = path.join(cacheDir, 'vastrun');
  if (fs.existsSync(`${cacheDir}.complete`) && fs.existsSync(bin)) {
    log(`vastrun: using ${version} from the tool cache`);
    return bin;
  }
  const name = `vastrun_${version}_${goos}_${goarch}.tar.gz`;
  const url = `${base}/v${version}`;
  const sums = await download(`${url}/checksums.txt`);
  if (!sums) throw new Error(`release v${version} has no checksums.txt at ${url}; refusing to install an unverifiable binary`);
  const want = checksumFor(sums.toString('utf8'), name);
  if (!want) throw new Error(`checksums.txt of v${version} does not list ${name}; refusing to install it`);
  const archive = await download(`${url}/${name}`);
  if (!archive) throw new Error(`release v${version} has no ${name} (${url}/${name}: 404)`);
  const got = crypto.createHash('sha256').update(archive).digest('hex');
  if (got !== want) {
    throw new Error(`SHA-256 mismatch for ${name}: checksums.txt says ${want}, the download is ${got}; refusing to install it`);
  }
  log(`vastrun: ${name} matches checksums.txt (sha256 ${got})`);

  const work = fs.mkdtempSync(path.join(process.env.RUNNER_TEMP || os.tmpdir(), 'vastrun-dl-'));
  try {
    fs.writeFileSync(path.join(work, 'checksums.txt'), sums);
    fs.writeFileSync(path.join(work, name), archive);
    const bundle = await download(`${url}/checksums.txt.sigstore.json`);
    if (bundle) fs.writeFileSync(path.join(work, 'checksums.txt.sigstore.json'), bundle);
    verifyCosign(work, version, log);
    verifyAttestation(path.join(work, name), log);
    fs.mkdirSync(cacheDir, { recursive: true });
    const x = spawnSync('tar', ['-xzf', path.join(work, name), '-C', cacheDir, 'vastrun'], { encoding: 'utf8' });
    if (x.status !== 0) throw new Error(`extract ${name}: ${x.stderr.trim()}`);
    fs.chmodSync(bin, 0o755);
    fs.writeFileSync(`${cacheDir}.complete`, '');
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  return bin;
}

// buildSource builds vastrun from the action's own checkout with Go (for
// forks and runners without release access).
function buildSource(version) {
  const root = actionRoot();
  const out = path.join(process.env.RUNNER_TEMP || fs.mkdtempSync(path.join(os.tmpdir(), 'vastrun-')), 'vastrun');
  const ld = `-X github.com/vastrun/vastrun/internal/cli.Version=${version}-source`;
  const b = spawnSync('go', ['build', '-trimpath', '-ldflags', ld, '-o', out, './cmd/vastrun'], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, CGO_ENABLED: '0' } });
  if (b.status !== 0) throw new Error('install-mode: source could not build vastrun with Go (is Go 1.26 set up?); use install-mode: binary');
  return out;
}

// findVastrun resolves the binary by install-mode: binary (the default:
// the verified release matching this action), source, or path (the
// vastrun-path input, else vastrun on PATH). Giving vastrun-path alone
// implies path.
async function findVastrun() {
  const explicit = input('vastrun-path');
  const mode = input('install-mode', explicit ? 'path' : 'binary');
  switch (mode) {
    case 'binary':
      return installBinary();
    case 'source':
      return buildSource(ownVersion());
    case 'path': {
      const bin = explicit || onPath('vastrun');
      if (!bin) throw new Error('install-mode: path, but vastrun-path is empty and vastrun is not on PATH');
      return bin;
    }
    default:
      throw new Error(`unknown install-mode "${mode}" (use binary, source or path)`);
  }
}

// run executes vastrun with the key in the environment (never in argv),
// stderr passed through, stdout captured. vastrun's own GITHUB_OUTPUT
// lines are suppressed: the action writes its documented outputs once.
// GITHUB_STATE stays, so vastrun records the rental the moment it rents.
function run(bin, args) {
  const env = { ...process.env };
  delete env.GITHUB_OUTPUT;
  const key = input('vast-api-key');
  if (key) env.VAST_API_KEY = key;
  return new Promise((resolve) => {
    const child = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    // Forward cancellation: GitHub sends SIGINT, then SIGTERM.
    const forward = (sig) => () => child.kill(sig);
    process.on('SIGINT', forward('SIGINT'));
    process.on('SIGTERM', forward('SIGTERM'));
    child.on('close', (code, signal) => resolve({ code: code === null ? 128 : code, signal, stdout: out }));
  });
}

function unquote(item) {
  const s = item.trim();
  if (s.startsWith('"') && s.endsWith('"') && s.length >= 2) return JSON.parse(s);
  if (s.startsWith("'") && s.endsWith("'") && s.length >= 2) return s.slice(1, -1).replace(/''/g, "'");
  return s;
}

// splitFlow splits a YAML flow sequence body at commas outside quotes.
function splitFlow(body) {
  const items = [];
  let cur = '';
  let quote = '';
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (quote) {
      cur += c;
      if (quote === '"' && c === '\\') { cur += body[++i] || ''; continue; }
      if (c === quote) {
        if (quote === "'" && body[i + 1] === "'") { cur += body[++i]; continue; }
        quote = '';
      }
    } else if (c === '"' || c === "'") {
      quote = c; cur += c;
    } else if (c === ',') {
      items.push(cur); cur = '';
    } else {
      cur += c;
    }
  }
  if (quote) throw new Error('args: unterminated quote in the list');
  if (cur.trim() !== '' || items.length) items.push(cur);
  return items.map(unquote);
}

// parseArgs reads the args input: a YAML list, flow (["a", "b c"]) or
// block ("- a" per line), or a multi-line string with one argument per
// line. Nothing is split on spaces, so a JSON value passes intact.
function parseArgs(s) {
  const text = (s || '').trim();
  if (!text) return [];
  if (text.startsWith('[')) {
    if (!text.endsWith(']')) throw new Error('args: a list must end with ]');
    return splitFlow(text.slice(1, -1));
  }
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== '');
  if (lines.every((l) => l === '-' || l.startsWith('- '))) return lines.map((l) => unquote(l.slice(1)));
  return lines;
}

module.exports = {
  input, setOutput, addPath, saveState, getState, stateLabels, mask, findVastrun, installBinary, ownVersion, run, parseArgs, checksumFor,
};
