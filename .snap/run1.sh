#!/usr/bin/env bash
source .devdeps/env.sh
export TG_GPU_BUILD=/tmp/b1
B=/tmp/b1
nvidia-smi -L
t0=$(date +%s)
{ cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_WERROR=ON -DTAPEGRAD_NATIVE=ON &&
  cmake --build $B -j16 --target odeint_bench unet_step; } > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
python3 -c "import torchdiffeq, diffrax; print('torchdiffeq', torchdiffeq.__version__, 'diffrax', diffrax.__version__)"
$B/bench/odeint_bench 2>&1 | tee $OUT/odeint_ours.txt
echo "ours done $(( $(date +%s) - t0 )) s"
timeout 300 python3 bench/peers/odeint_peers.py --build $B --frameworks torchdiffeq jax diffrax 2>&1 | tee $OUT/odeint_peers.txt
echo "all $(( $(date +%s) - t0 )) s"
