'use strict';
// Helpers shared by the action's main and post steps. Node built-ins only:
// the action must run without an npm install.
const fs = require('fs');
const path = require('path');
const { spawn, spawnSync } = require('child_process');

function input(name, fallback = '') {
  const v = process.env[`INPUT_${name.replace(/ /g, '_').toUpperCase()}`];
  return v === undefined || v === '' ? fallback : v.trim();
}

function appendFile(file, text) {
  if (file) fs.appendFileSync(file, text);
}

function setOutput(name, value) {
  appendFile(process.env.GITHUB_OUTPUT, `${name}=${value}\n`);
}

function saveState(name, value) {
  appendFile(process.env.GITHUB_STATE, `${name}=${value}\n`);
}

// The post step sees state saved by main (and by vastrun itself, which
// writes instance_id, label and run_id the moment it rents) as STATE_name.
function getState(name) {
  return process.env[`STATE_${name}`] || '';
}

function mask(value) {
  if (value) process.stdout.write(`::add-mask::${value}\n`);
}

function findVastrun() {
  const explicit = input('vastrun-path');
  if (explicit) return explicit;
  const onPath = spawnSync('sh', ['-c', 'command -v vastrun'], { encoding: 'utf8' });
  if (onPath.status === 0 && onPath.stdout.trim()) return onPath.stdout.trim();
  // Build from the action's own source.
  const root = process.env.GITHUB_ACTION_PATH || path.join(__dirname, '..');
  const out = path.join(process.env.RUNNER_TEMP || fs.mkdtempSync('/tmp/vastrun-'), 'vastrun');
  const b = spawnSync('go', ['build', '-o', out, './cmd/vastrun'], { cwd: root, stdio: 'inherit', env: { ...process.env, CGO_ENABLED: '0' } });
  if (b.status !== 0) throw new Error('vastrun is not on PATH and could not be built with Go; set the vastrun-path input');
  return out;
}

// run executes vastrun with the key in the environment (never in argv),
// stderr passed through, stdout captured.
function run(bin, args) {
  const env = { ...process.env };
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

function splitArgs(s) {
  return s ? s.split(/\s+/).filter(Boolean) : [];
}

module.exports = { input, setOutput, saveState, getState, mask, findVastrun, run, splitArgs };
