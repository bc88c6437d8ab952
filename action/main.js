'use strict';
const lib = require('./lib');

async function main() {
  const command = lib.input('command', 'ci');
  if (!['ci', 'up', 'down', 'reap', 'install', 'plan', 'apply'].includes(command)) {
    console.log(`::error title=vastrun::unknown command "${command}" (use ci, up, down, reap, plan, apply or install)`);
    process.exitCode = 2;
    return;
  }
  lib.mask(lib.input('vast-api-key'));
  const extra = lib.parseArgs(lib.input('args'));
  const bin = await lib.findVastrun();
  lib.saveState('vastrun_bin', bin);
  lib.saveState('command', command);
  if (command === 'install') {
    // Later steps run vastrun themselves: the verified binary goes on PATH.
    lib.addPath(require('path').dirname(bin));
    lib.setOutput('vastrun-path', bin);
    return;
  }
  // plan rents nothing and needs no yes; apply runs exactly the saved
  // plan, and with plan-sha256 only if it is the approved one.
  const planFile = lib.input('plan', 'plan.json');
  const args = command === 'plan' ? ['plan', lib.input('workflow', 'ci'), '-o', planFile, '--json']
    : command === 'apply' ? ['apply', planFile, '--yes', '--json'] : [command, '--yes', '--json'];
  if (['ci', 'up', 'plan'].includes(command)) args.push('-f', lib.input('config', 'vastrun.yaml'));
  if (command === 'apply' && lib.input('plan-sha256')) args.push('--sha256', lib.input('plan-sha256'));
  if (lib.input('evidence-dir')) args.push('--evidence-dir', lib.input('evidence-dir'));
  if (lib.input('sim') === 'true') args.push('--sim');
  args.push(...extra);
  lib.saveState('sim', lib.input('sim') === 'true' ? 'true' : 'false');

  const res = await lib.run(bin, args);
  let doc = {};
  try { doc = JSON.parse(res.stdout); } catch (_) { /* not every exit prints JSON */ }
  // Each output once, under the names action.yml documents.
  lib.setOutput('exit-code', String(res.code));
  if (doc.outcome) lib.setOutput('outcome', doc.outcome);
  if (doc.run_id) lib.setOutput('run-id', doc.run_id);
  if (doc.label) lib.setOutput('label', doc.label);
  const inst = doc.instance_id || (doc.attempts && doc.attempts.length ? doc.attempts[doc.attempts.length - 1].instance_id : '');
  if (inst) lib.setOutput('instance-id', String(inst));
  if (doc.evidence_dir) lib.setOutput('receipt', `${doc.evidence_dir}/receipt.json`);
  // plan's document is the plan (its sha256); apply's receipt names it.
  const planSHA = command === 'plan' ? doc.sha256 : doc.plan_sha256;
  if (planSHA) lib.setOutput('plan-sha256', planSHA);
  lib.setOutput('vastrun-path', bin);
  // The post step cleans up only if main did not finish its own teardown.
  lib.saveState('main_exit', String(res.code));
  process.exitCode = res.code;
}

main().catch((err) => {
  console.log(`::error title=vastrun::${err.message}`);
  process.exitCode = 1;
});
