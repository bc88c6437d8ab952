// Tests the GitHub Action's main and post steps against vastrun's
// simulator, with node's built-in test runner: node --test 'action/test/*.test.mjs'
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '..', '..');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vastrun-action-'));
let bin = process.env.VASTRUN_BIN;

before(() => {
  if (!bin) {
    bin = path.join(tmp, 'vastrun');
    const b = spawnSync('go', ['build', '-o', bin, './cmd/vastrun'], { cwd: root, stdio: 'inherit' });
    assert.equal(b.status, 0, 'go build failed');
  }
});

const config = `image: ghcr.io/acme/gpu-test@sha256:${'ab'.repeat(32)}
test: sh gpu-test.sh
upload: [gpu-test.sh]
gpu: {models: [RTX_4090, RTX_3090], max_dph: 1.0}
budget: {max_spend: 5}
timeouts: {ready: 5m, job: 1m, teardown: 30s}
`;

function workdir(name) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'vastrun.yaml'), config);
  fs.writeFileSync(path.join(dir, 'gpu-test.sh'), 'nvidia-smi -L\necho \'{"ok": true}\' > "$VASTRUN_RESULT"\n');
  for (const f of ['out', 'state', 'summary']) fs.writeFileSync(path.join(dir, f), '');
  return dir;
}

function kv(file) {
  const m = {};
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) m[line.slice(0, i)] = line.slice(i + 1);
  }
  return m;
}

function baseEnv(dir, extra) {
  return {
    PATH: process.env.PATH, HOME: dir, GITHUB_ACTIONS: 'true', GITHUB_EVENT_NAME: 'push',
    GITHUB_OUTPUT: path.join(dir, 'out'), GITHUB_STATE: path.join(dir, 'state'), GITHUB_STEP_SUMMARY: path.join(dir, 'summary'),
    RUNNER_TEMP: dir, 'INPUT_VASTRUN-PATH': bin, ...extra,
  };
}

function node(script, dir, env) {
  const child = spawn(process.execPath, [path.join(root, 'action', script)], { cwd: dir, env, detached: true });
  let stdout = '';
  child.stdout.on('data', (d) => { stdout += d; });
  child.stderr.on('data', () => {});
  const done = new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout })));
  return { child, done };
}

function stateEnv(dir) {
  const env = {};
  for (const [k, v] of Object.entries(kv(path.join(dir, 'state')))) env[`STATE_${k}`] = v;
  return env;
}

async function until(cond, what, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

test('main runs ci on the embedded simulator, masks the key and sets outputs', async () => {
  const dir = workdir('happy');
  const env = baseEnv(dir, { INPUT_COMMAND: 'ci', INPUT_CONFIG: 'vastrun.yaml', INPUT_SIM: 'true', 'INPUT_VAST-API-KEY': 'do-not-print-me-123' });
  const { code, stdout } = await node('main.js', dir, env).done;
  assert.equal(code, 0);
  assert.match(stdout, /::add-mask::do-not-print-me-123/);
  const out = kv(path.join(dir, 'out'));
  assert.equal(out.outcome, 'passed');
  assert.equal(out['exit-code'], '0');
  assert.match(out['instance-id'], /^\d+$/);
  assert.match(out.label, /^vastrun-/);
  assert.ok(fs.existsSync(path.join(dir, out.receipt)), 'receipt file exists');
  assert.match(fs.readFileSync(path.join(dir, 'summary'), 'utf8'), /passed/);

  const post = await node('post.js', dir, { ...baseEnv(dir), ...stateEnv(dir) }).done;
  assert.equal(post.code, 0);
  assert.match(post.stdout, /nothing to clean up/);
});

test('post destroys the rental when main is killed mid-run', async () => {
  const dir = workdir('killed');
  const ready = path.join(dir, 'sim.json');
  const sim = spawn(bin, ['sim', 'serve', '--ready-file', ready, '--speed', '60', '--sim-key', 'simkey'], { stdio: 'ignore' });
  try {
    await until(() => fs.existsSync(ready), 'simulator');
    const { url } = JSON.parse(fs.readFileSync(ready, 'utf8'));
    const fault = await fetch(`${url}/_sim/faults`, { method: 'POST', body: JSON.stringify({ kind: 'slow_loading', seconds: 100000 }) });
    assert.equal(fault.status, 200);
    const live = async () => (await (await fetch(`${url}/_sim/state`)).json()).live.length;

    const env = baseEnv(dir, { INPUT_COMMAND: 'ci', INPUT_CONFIG: 'vastrun.yaml', 'INPUT_VAST-API-KEY': 'simkey', VAST_URL: url });
    const main = node('main.js', dir, env);
    // vastrun writes the label to GITHUB_STATE the moment it rents.
    await until(() => 'label' in kv(path.join(dir, 'state')) && true, 'the rental to be recorded');
    await until(async () => (await live()) === 1, 'one live instance');
    process.kill(-main.child.pid, 'SIGKILL'); // the runner kills the whole tree
    await main.done;
    assert.equal(await live(), 1, 'the killed main left its instance behind');

    const post = await node('post.js', dir, { ...baseEnv(dir, { VAST_URL: url, 'INPUT_VAST-API-KEY': 'simkey' }), ...stateEnv(dir) }).done;
    assert.equal(post.code, 0, post.stdout);
    assert.match(post.stdout, /did not finish; destroying label vastrun-/);
    assert.equal(await live(), 0, 'post destroyed the rental');
  } finally {
    sim.kill('SIGINT');
  }
});

test('main refuses an unknown command', async () => {
  const dir = workdir('bad');
  const { code, stdout } = await node('main.js', dir, baseEnv(dir, { INPUT_COMMAND: 'destroy-everything' })).done;
  assert.equal(code, 2);
  assert.match(stdout, /unknown command/);
});

test('plan then apply: the plan job rents nothing; apply runs only the approved hash', async () => {
  const dir = workdir('plan-apply');
  const ready = path.join(dir, 'sim.json');
  const sim = spawn(bin, ['sim', 'serve', '--ready-file', ready, '--speed', '60', '--sim-key', 'simkey'], { stdio: 'ignore' });
  try {
    await until(() => fs.existsSync(ready), 'simulator');
    const { url } = JSON.parse(fs.readFileSync(ready, 'utf8'));
    const rented = async () => { const s = await (await fetch(`${url}/_sim/state`)).json(); return s.live.length + (s.destroyed || []).length; };
    const env = { VAST_URL: url, 'INPUT_VAST-API-KEY': 'simkey', INPUT_PLAN: 'plan.json' };
    const plan = await node('main.js', dir, baseEnv(dir, { ...env, INPUT_COMMAND: 'plan', INPUT_CONFIG: 'vastrun.yaml' })).done;
    assert.equal(plan.code, 0, plan.stdout);
    const sha = kv(path.join(dir, 'out'))['plan-sha256'];
    assert.match(sha, /^[0-9a-f]{64}$/);
    assert.equal(JSON.parse(fs.readFileSync(path.join(dir, 'plan.json'), 'utf8')).sha256, sha);
    assert.equal(await rented(), 0, 'plan rented');
    const postPlan = await node('post.js', dir, { ...baseEnv(dir), ...stateEnv(dir) }).done;
    assert.match(postPlan.stdout, /nothing to clean up/);

    fs.writeFileSync(path.join(dir, 'out'), '');
    const other = await node('main.js', dir, baseEnv(dir, { ...env, INPUT_COMMAND: 'apply', 'INPUT_PLAN-SHA256': '0'.repeat(64) })).done;
    assert.equal(other.code, 2, 'a plan other than the approved one applied');
    assert.equal(await rented(), 0);

    fs.writeFileSync(path.join(dir, 'out'), '');
    const apply = await node('main.js', dir, baseEnv(dir, { ...env, INPUT_COMMAND: 'apply', 'INPUT_PLAN-SHA256': sha })).done;
    assert.equal(apply.code, 0, apply.stdout);
    const out = kv(path.join(dir, 'out'));
    assert.equal(out.outcome, 'passed');
    assert.equal(out['plan-sha256'], sha);
    assert.equal(await rented(), 1);
  } finally {
    sim.kill('SIGINT');
  }
});
