#!/usr/bin/env bash
# Starts OpenSSH sshd on a free 127.0.0.1 port for the remote layer's
# real-server tests, and prints the environment the tests read:
#   eval "$(scripts/start-sshd.sh DIR)"
# Installs openssh-server with apt when sshd is missing. Fails loudly.
set -euo pipefail
dir=${1:?usage: start-sshd.sh DIR}
mkdir -p "$dir" /run/sshd
if [ ! -x /usr/sbin/sshd ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server) >&2
fi
[ -x /usr/sbin/sshd ] || { echo "sshd is not installed and could not be installed" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rm -f "$dir"/host_key* "$dir"/client_key*
ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$dir/client_key"
cp "$dir/client_key.pub" "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"
cat > "$dir/sshd_config" <<CONF
Port $port
ListenAddress 127.0.0.1
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
PidFile $dir/sshd.pid
Subsystem sftp internal-sftp
CONF
/usr/sbin/sshd -t -f "$dir/sshd_config"
/usr/sbin/sshd -D -e -f "$dir/sshd_config" > "$dir/sshd.log" 2>&1 &
echo $! > "$dir/sshd.run.pid"
for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
(exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null || { echo "sshd did not start:" >&2; cat "$dir/sshd.log" >&2; exit 1; }
echo "export VASTRUN_TEST_SSHD_ADDR=127.0.0.1:$port VASTRUN_TEST_SSHD_KEY=$dir/client_key VASTRUN_TEST_SSHD_PID=$(cat "$dir/sshd.run.pid")"
