'use strict';
// Runs after the job, even when it was cancelled (post-if: always()).
// If main never finished (killed mid-run) or could not confirm cleanup
// (exit 7), destroy whatever carries the run's label, and confirm.
const lib = require('./lib');

async function post() {
  const command = lib.getState('command') || 'ci';
  const exit = lib.getState('main_exit');
  const labels = lib.stateLabels();
  const finished = exit !== '';
  const keep = command === 'up' && exit === '0'; // up keeps its instance for later jobs
  if (keep || (finished && exit !== '7') || ['down', 'reap', 'install', 'plan'].includes(command)) {
    console.log('vastrun post: nothing to clean up');
    return;
  }
  if (labels.length === 0) {
    console.log('vastrun post: main did not finish and rented nothing');
    return;
  }
  if (lib.getState('sim') === 'true') {
    console.log('vastrun post: the embedded simulator ended with main; nothing is billed');
    return;
  }
  const bin = lib.getState('vastrun_bin') || await lib.findVastrun();
  // Every run's label: one that fails to clean up does not stop the others.
  for (const label of labels) {
    console.log(`vastrun post: main ${finished ? `exited ${exit}` : 'did not finish'}; destroying label ${label}`);
    const res = await lib.run(bin, ['down', '--label', label, '--yes', '--json']);
    process.stdout.write(res.stdout);
    if (res.code !== 0) {
      console.log(`::error title=vastrun::cleanup of label ${label} failed (exit ${res.code}): instances may still be billing`);
      process.exitCode = res.code;
    }
  }
}

post().catch((err) => {
  console.log(`::error title=vastrun::${err.message}`);
  process.exitCode = 1;
});
