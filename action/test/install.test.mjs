// Tests the Action's binary install against a local HTTP server serving a
// release layout: the GoReleaser snapshot in VASTRUN_RELEASE_DIST (what
// .ci/run builds), else a layout built here with the same names. Runs with
// node's built-in test runner: node --test 'action/test/*.test.mjs'
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);
const root = path.resolve(import.meta.dirname, '..', '..');
const lib = require(path.join(root, 'action', 'lib.js'));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vastrun-install-'));
const goos = { linux: 'linux', darwin: 'darwin' }[process.platform];
const goarch = { x64: 'amd64', arm64: 'arm64' }[process.arch];

let dist; // directory holding checksums.txt and the archives
let version;
let server;
let base;
// Layouts the server offers, by URL prefix: /good, /tampered, /unlisted, /nosums.
const layouts = {};

function sha256(file) {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

// buildLayout makes a release layout the way .goreleaser.yaml names it,
// for running these tests without GoReleaser.
function buildLayout(dir) {
  version = '0.0.0-test';
  const stage = path.join(tmp, 'stage');
  fs.mkdirSync(stage, { recursive: true });
  const ld = `-X github.com/vastrun/vastrun/internal/cli.Version=${version}`;
  const b = spawnSync('go', ['build', '-trimpath', '-ldflags', ld, '-o', path.join(stage, 'vastrun'), './cmd/vastrun'],
    { cwd: root, stdio: 'inherit', env: { ...process.env, CGO_ENABLED: '0' } });
  assert.equal(b.status, 0, 'go build failed');
  for (const f of ['LICENSE', 'README.md', 'CHANGELOG.md']) fs.copyFileSync(path.join(root, f), path.join(stage, f));
  fs.mkdirSync(dir, { recursive: true });
  const name = `vastrun_${version}_${goos}_${goarch}.tar.gz`;
  const t = spawnSync('tar', ['-czf', path.join(dir, name), '-C', stage, 'vastrun', 'LICENSE', 'README.md', 'CHANGELOG.md']);
  assert.equal(t.status, 0, 'tar failed');
  fs.writeFileSync(path.join(dir, 'checksums.txt'), `${sha256(path.join(dir, name))}  ${name}\n`);
}

function copyLayout(from, to) {
  fs.mkdirSync(to, { recursive: true });
  for (const f of fs.readdirSync(from)) {
    if (f === 'checksums.txt' || f.endsWith('.tar.gz')) fs.copyFileSync(path.join(from, f), path.join(to, f));
  }
}

const archiveName = () => `vastrun_${version}_${goos}_${goarch}.tar.gz`;

before(async () => {
  dist = process.env.VASTRUN_RELEASE_DIST;
  if (dist) {
    version = JSON.parse(fs.readFileSync(path.join(dist, 'metadata.json'), 'utf8')).version;
  } else {
    dist = path.join(tmp, 'dist');
    buildLayout(dist);
  }
  layouts.good = dist;
  // Tampered: the archive's bytes changed after checksums.txt was written
  // (one byte flipped in the middle, as a compromised mirror would).
  layouts.tampered = path.join(tmp, 'tampered');
  copyLayout(dist, layouts.tampered);
  const a = path.join(layouts.tampered, archiveName());
  const bytes = fs.readFileSync(a);
  bytes[bytes.length >> 1] ^= 0xff;
  fs.writeFileSync(a, bytes);
  // Unlisted: checksums.txt does not mention this runner's archive.
  layouts.unlisted = path.join(tmp, 'unlisted');
  copyLayout(dist, layouts.unlisted);
  const sums = fs.readFileSync(path.join(dist, 'checksums.txt'), 'utf8').split('\n').filter((l) => !l.endsWith(archiveName()));
  fs.writeFileSync(path.join(layouts.unlisted, 'checksums.txt'), sums.join('\n'));
  // No checksums.txt at all.
  layouts.nosums = path.join(tmp, 'nosums');
  copyLayout(dist, layouts.nosums);
  fs.rmSync(path.join(layouts.nosums, 'checksums.txt'));

  server = http.createServer((req, res) => {
    // /LAYOUT/vVERSION/FILE, as GitHub's releases/download/TAG/FILE.
    const m = decodeURIComponent(req.url).match(/^\/(\w+)\/v([^/]+)\/([^/]+)$/);
    const dir = m && layouts[m[1]];
    const file = dir && m[2] === version && path.join(dir, m[3]);
    if (!file || !fs.existsSync(file)) { res.writeHead(404); res.end('not found'); return; }
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => server && server.close());

function quiet() {
  const lines = [];
  return { log: (s) => lines.push(s), lines };
}

test('the snapshot layout names this runner\'s archive in checksums.txt', () => {
  const sums = fs.readFileSync(path.join(dist, 'checksums.txt'), 'utf8');
  assert.equal(lib.checksumFor(sums, archiveName()), sha256(path.join(dist, archiveName())));
});

test('installs the verified release binary into the tool cache, then reuses it', async () => {
  const cache = path.join(tmp, 'cache-good');
  const q = quiet();
  const bin = await lib.installBinary({ version, releaseURL: `${base}/good`, toolCache: cache, log: q.log });
  assert.equal(bin, path.join(cache, 'vastrun', version, goarch, 'vastrun'));
  assert.ok(fs.existsSync(path.join(cache, 'vastrun', version, `${goarch}.complete`)));
  assert.ok(q.lines.some((l) => l.includes('matches checksums.txt')), q.lines.join('\n'));
  const v = spawnSync(bin, ['version', '--json'], { encoding: 'utf8' });
  assert.equal(v.status, 0, v.stderr);
  assert.equal(JSON.parse(v.stdout).version, version);

  const again = quiet();
  assert.equal(await lib.installBinary({ version, releaseURL: `${base}/good`, toolCache: cache, log: again.log }), bin);
  assert.ok(again.lines.some((l) => l.includes('from the tool cache')), again.lines.join('\n'));
});

test('a tampered archive is refused and nothing is cached', async () => {
  const cache = path.join(tmp, 'cache-tampered');
  await assert.rejects(
    lib.installBinary({ version, releaseURL: `${base}/tampered`, toolCache: cache, log: () => {} }),
    /SHA-256 mismatch for vastrun_.*refusing to install it/,
  );
  assert.ok(!fs.existsSync(path.join(cache, 'vastrun')), 'nothing may land in the tool cache');
});

test('an archive missing from checksums.txt, or no checksums.txt, is refused', async () => {
  await assert.rejects(
    lib.installBinary({ version, releaseURL: `${base}/unlisted`, toolCache: path.join(tmp, 'cache-unlisted'), log: () => {} }),
    /does not list vastrun_.*refusing/,
  );
  await assert.rejects(
    lib.installBinary({ version, releaseURL: `${base}/nosums`, toolCache: path.join(tmp, 'cache-nosums'), log: () => {} }),
    /has no checksums.txt.*refusing/,
  );
});

test('args: a YAML list or one argument per line, never split on spaces', () => {
  const fault = '{"kind": "slow_loading", "seconds": 1}';
  assert.deepEqual(lib.parseArgs(`["--sim-fault", ${JSON.stringify(fault)}, '--settle', 1s]`), ['--sim-fault', fault, '--settle', '1s']);
  assert.deepEqual(lib.parseArgs(`- --sim-fault\n- '${fault}'\n- 'it''s'\n`), ['--sim-fault', fault, "it's"]);
  assert.deepEqual(lib.parseArgs(`--sim-fault\n${fault}\n\n--settle\n1s\n`), ['--sim-fault', fault, '--settle', '1s']);
  assert.deepEqual(lib.parseArgs(''), []);
  assert.throws(() => lib.parseArgs('["unterminated]'), /unterminated quote/);
});

function kv(file) {
  const m = {};
  const keys = [];
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) { m[line.slice(0, i)] = line.slice(i + 1); keys.push(line.slice(0, i)); }
  }
  return { m, keys };
}

function runMain(dir, extra) {
  for (const f of ['out', 'state', 'summary']) fs.writeFileSync(path.join(dir, f), '');
  const env = {
    PATH: process.env.PATH, HOME: dir, GITHUB_ACTIONS: 'true', GITHUB_EVENT_NAME: 'push',
    GITHUB_OUTPUT: path.join(dir, 'out'), GITHUB_STATE: path.join(dir, 'state'), GITHUB_STEP_SUMMARY: path.join(dir, 'summary'),
    RUNNER_TEMP: dir, RUNNER_TOOL_CACHE: path.join(dir, 'toolcache'),
    INPUT_COMMAND: 'ci', INPUT_CONFIG: 'vastrun.yaml', INPUT_SIM: 'true',
    'INPUT_INSTALL-MODE': 'binary', INPUT_VERSION: version, ...extra,
  };
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(root, 'action', 'main.js')], { cwd: dir, env });
    let stdout = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', () => {});
    child.on('close', (code) => resolve({ code, stdout }));
  });
}

function project(name) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'vastrun.yaml'), `image: ghcr.io/acme/gpu-test@sha256:${'ab'.repeat(32)}
test: sh gpu-test.sh
upload: [gpu-test.sh]
gpu: {models: [RTX_4090, RTX_3090], max_dph: 1.0}
budget: {max_spend: 5}
timeouts: {ready: 5m, job: 1m, teardown: 30s}
`);
  fs.writeFileSync(path.join(dir, 'gpu-test.sh'), 'nvidia-smi -L\necho \'{"ok": true}\' > "$VASTRUN_RESULT"\n');
  return dir;
}

test('main installs the release binary, passes a JSON arg intact and writes each output once', async () => {
  const dir = project('main-binary');
  const res = await runMain(dir, {
    'INPUT_RELEASE-URL': `${base}/good`,
    // A quoted JSON value with spaces: must reach vastrun as one argument.
    INPUT_ARGS: '- --sim-fault\n- \'{"kind": "slow_loading", "seconds": 1}\'\n',
  });
  assert.equal(res.code, 0, res.stdout);
  const { m, keys } = kv(path.join(dir, 'out'));
  assert.equal(m.outcome, 'passed');
  assert.equal(m['exit-code'], '0');
  assert.match(m['instance-id'], /^\d+$/);
  assert.match(m['run-id'], /\S/);
  assert.match(m.label, /^vastrun-/);
  assert.equal(m['vastrun-path'], path.join(dir, 'toolcache', 'vastrun', version, goarch, 'vastrun'));
  assert.deepEqual([...keys].sort(), [...new Set(keys)].sort(), `an output written twice: ${keys}`);
  for (const k of ['run_id', 'instance_id']) assert.ok(!(k in m), `undocumented output ${k}`);
  // The rental is still recorded for the post step.
  assert.match(kv(path.join(dir, 'state')).m.label, /^vastrun-/);
});

test('main refuses a tampered release and never runs it', async () => {
  const dir = project('main-tampered');
  const res = await runMain(dir, { 'INPUT_RELEASE-URL': `${base}/tampered` });
  assert.equal(res.code, 1);
  assert.match(res.stdout, /::error title=vastrun::SHA-256 mismatch/);
  assert.equal(fs.readFileSync(path.join(dir, 'out'), 'utf8'), '', 'no outputs: vastrun never ran');
  assert.ok(!('vastrun_bin' in kv(path.join(dir, 'state')).m));
});

test('install puts the verified binary on PATH and runs nothing; post has nothing to do', async () => {
  const dir = project('install');
  fs.writeFileSync(path.join(dir, 'path'), '');
  const res = await runMain(dir, { INPUT_COMMAND: 'install', 'INPUT_RELEASE-URL': `${base}/good`, GITHUB_PATH: path.join(dir, 'path') });
  assert.equal(res.code, 0, res.stdout);
  const bindir = path.join(dir, 'toolcache', 'vastrun', version, goarch);
  assert.equal(fs.readFileSync(path.join(dir, 'path'), 'utf8'), `${bindir}\n`);
  const { m, keys } = kv(path.join(dir, 'out'));
  assert.deepEqual(keys, ['vastrun-path']);
  assert.equal(m['vastrun-path'], path.join(bindir, 'vastrun'));
  const state = {};
  for (const [k, v] of Object.entries(kv(path.join(dir, 'state')).m)) state[`STATE_${k}`] = v;
  const post = spawnSync(process.execPath, [path.join(root, 'action', 'post.js')], { cwd: dir, env: { PATH: process.env.PATH, ...state }, encoding: 'utf8' });
  assert.equal(post.status, 0, post.stdout);
  assert.match(post.stdout, /nothing to clean up/);
});

// cosign itself cannot run here (it needs Sigstore's servers), so a
// stand-in on PATH records how the action calls it and answers as told:
// what is tested is the action's wiring — the identity and issuer it
// demands, and that a refusal stops the install.
function fakeCosign(exitCode) {
  const dir = fs.mkdtempSync(path.join(tmp, 'cosign-'));
  const log = path.join(dir, 'argv');
  fs.writeFileSync(path.join(dir, 'cosign'), `#!/bin/sh\nprintf '%s\\n' "$@" > '${log}'\necho 'stand-in cosign verdict' >&2\nexit ${exitCode}\n`, { mode: 0o755 });
  return { dir, log };
}

test('with cosign on PATH, the signature of checksums.txt is checked and a refusal stops the install', async () => {
  layouts.signed = path.join(tmp, 'signed');
  copyLayout(dist, layouts.signed);
  fs.writeFileSync(path.join(layouts.signed, 'checksums.txt.sigstore.json'), '{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}');
  const oldPath = process.env.PATH;
  try {
    const ok = fakeCosign(0);
    process.env.PATH = `${ok.dir}:${oldPath}`;
    const q = quiet();
    const bin = await lib.installBinary({ version, releaseURL: `${base}/signed`, toolCache: path.join(tmp, 'cache-signed'), log: q.log });
    assert.ok(fs.existsSync(bin));
    const argv = fs.readFileSync(ok.log, 'utf8').split('\n');
    assert.equal(argv[0], 'verify-blob');
    assert.equal(argv[argv.indexOf('--certificate-identity') + 1], `https://github.com/vastrun/vastrun/.github/workflows/release.yml@refs/tags/v${version}`);
    assert.equal(argv[argv.indexOf('--certificate-oidc-issuer') + 1], 'https://token.actions.githubusercontent.com');
    assert.ok(argv.some((a) => a.endsWith('checksums.txt.sigstore.json')) && argv.some((a) => a.endsWith('/checksums.txt')));
    assert.ok(q.lines.some((l) => l.includes('cosign verified')), q.lines.join('\n'));

    const bad = fakeCosign(1);
    process.env.PATH = `${bad.dir}:${oldPath}`;
    const cache = path.join(tmp, 'cache-badsig');
    await assert.rejects(
      lib.installBinary({ version, releaseURL: `${base}/signed`, toolCache: cache, log: () => {} }),
      /cosign refused the signature of checksums.txt: stand-in cosign verdict/,
    );
    assert.ok(!fs.existsSync(path.join(cache, 'vastrun')), 'nothing may land in the tool cache');
  } finally {
    process.env.PATH = oldPath;
  }
});

test('install-mode: source builds the action\'s own checkout with Go', async () => {
  const dir = project('source');
  fs.writeFileSync(path.join(dir, 'path'), '');
  const res = await runMain(dir, { INPUT_COMMAND: 'install', 'INPUT_INSTALL-MODE': 'source', GITHUB_ACTION_PATH: root, GITHUB_PATH: path.join(dir, 'path'), HOME: process.env.HOME || dir, GOCACHE: process.env.GOCACHE || '', GOPATH: process.env.GOPATH || '', GOFLAGS: process.env.GOFLAGS || '' });
  assert.equal(res.code, 0, res.stdout);
  const { m } = kv(path.join(dir, 'out'));
  const v = spawnSync(m['vastrun-path'], ['version', '--json'], { encoding: 'utf8' });
  assert.equal(v.status, 0, v.stderr);
  assert.equal(JSON.parse(v.stdout).version, `${version}-source`);
});
