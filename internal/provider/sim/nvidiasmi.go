package sim

import (
	"fmt"
	"strings"
)

// nvidiaSMIScript is a POSIX sh stand-in for nvidia-smi that reports the
// rented GPU: model, count, VRAM, driver and CUDA version. It supports the
// forms vastrun and most scripts use: the default table, -L, and
// --query-gpu=... --format=csv[,noheader][,nounits].
func nvidiaSMIScript(in *instance) string {
	o := in.Offer
	m := o.Model
	var rows strings.Builder
	for i := 0; i < o.NumGPUs; i++ {
		fmt.Fprintf(&rows, "| %3d  %-26s  On  | 00000000:%02X:00.0 Off |                  Off |\n", i, trunc(m.smiName, 26), i+1)
		fmt.Fprintf(&rows, "| %2d%%   %2dC    P8  %10s / %4dW | %9s / %8s |      0%%      Default |\n", 0, 34+i, "21W", m.maxPower, "1MiB", fmt.Sprintf("%dMiB", m.vramMiB))
		rows.WriteString("|                                         |                      |                  N/A |\n")
		if i < o.NumGPUs-1 {
			rows.WriteString("+-----------------------------------------+----------------------+----------------------+\n")
		}
	}
	table := fmt.Sprintf(`+---------------------------------------------------------------------------------------+
| NVIDIA-SMI %-22s Driver Version: %-12s   CUDA Version: %-6s      |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
%s+-----------------------------------------+----------------------+----------------------+

+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
|  No running processes found                                                           |
+---------------------------------------------------------------------------------------+
`, o.Driver, o.Driver, fmt.Sprintf("%.1f", o.CUDA), rows.String())
	compCap := fmt.Sprintf("%d.%d", m.compCap/100, (m.compCap%100)/10)
	return fmt.Sprintf(`#!/bin/sh
# Simulated nvidia-smi (vastrun simulator, instance %d).
NAME='%s'; COUNT=%d; MEM=%d; DRIVER='%s'; CUDA='%.1f'; CAP='%s'; POWER=%d; MACHINE=%d
query=""; format=""; list=""
for a in "$@"; do
  case "$a" in
    --query-gpu=*) query="${a#--query-gpu=}" ;;
    --format=*) format="${a#--format=}" ;;
    -L|--list-gpus) list=1 ;;
    -h|--help) echo "NVIDIA System Management Interface -- v$DRIVER (simulated)"; exit 0 ;;
  esac
done
if [ -n "$list" ]; then
  i=0; while [ $i -lt $COUNT ]; do echo "GPU $i: $NAME (UUID: GPU-$MACHINE-0000-0000-0000-00000000000$i)"; i=$((i+1)); done
  exit 0
fi
if [ -z "$query" ]; then
  date '+%%a %%b %%e %%H:%%M:%%S %%Y'
  cat <<'TABLE'
%sTABLE
  exit 0
fi
case "$format" in csv*) ;; *) echo "Please specify --format=csv with --query-gpu" >&2; exit 2 ;; esac
noheader=""; nounits=""
case "$format" in *noheader*) noheader=1 ;; esac
case "$format" in *nounits*) nounits=1 ;; esac
unit() { if [ -n "$nounits" ]; then echo "$1"; else echo "$1 $2"; fi; }
value() {
  case "$1" in
    name|gpu_name) echo "$NAME" ;;
    count) echo "$COUNT" ;;
    index) echo "$2" ;;
    uuid|gpu_uuid) echo "GPU-$MACHINE-0000-0000-0000-00000000000$2" ;;
    driver_version) echo "$DRIVER" ;;
    memory.total) unit "$MEM" MiB ;;
    memory.used) unit 1 MiB ;;
    memory.free) unit $((MEM-1)) MiB ;;
    utilization.gpu|utilization.memory) unit 0 %% ;;
    temperature.gpu) echo 34 ;;
    power.draw) unit 21.00 W ;;
    power.limit) unit "$POWER.00" W ;;
    compute_cap) echo "$CAP" ;;
    pci.bus_id) echo "00000000:0$(($2+1)):00.0" ;;
    persistence_mode) echo Enabled ;;
    *) return 1 ;;
  esac
}
header() {
  case "$1" in
    memory.*) if [ -n "$nounits" ]; then echo "$1 [MiB]"; else echo "$1 [MiB]"; fi ;;
    utilization.*) echo "$1 [%%]" ;;
    power.*) echo "$1 [W]" ;;
    *) echo "$1" ;;
  esac
}
fields=$(echo "$query" | tr ',' ' ')
for f in $fields; do
  value "$f" 0 >/dev/null || { echo "Field \"$f\" is not a valid field to query." >&2; exit 2; }
done
if [ -z "$noheader" ]; then
  line=""; for f in $fields; do h=$(header "$f"); line="${line:+$line, }$h"; done; echo "$line"
fi
i=0
while [ $i -lt $COUNT ]; do
  line=""; for f in $fields; do v=$(value "$f" $i); line="${line:+$line, }$v"; done; echo "$line"
  i=$((i+1))
done
`, in.ID, m.smiName, o.NumGPUs, m.vramMiB, o.Driver, o.CUDA, compCap, m.maxPower, o.MachineID, table)
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
