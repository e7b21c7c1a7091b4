#!/usr/bin/env bash
# The GPU machine's checks, in one place:
#   scripts/gpu.sh build      configure + build (Release, -Werror) in build-gpu
#   scripts/gpu.sh test       the whole suite (GPU tests must run, not skip)
#   scripts/gpu.sh sanitize   compute-sanitizer memcheck on the GPU tests,
#                             racecheck and synccheck on the stream tests
#   scripts/gpu.sh memcheck-ops  memcheck on the CUDA op table's gradcheck halves
#                             (sharded: MEMCHECK_OPS_SHARDS processes per half)
#   scripts/gpu.sh bench      bench_cuda (bandwidth, GEMM, engine overhead) and the
#                             tg::linalg workloads with PyTorch and JAX (bench/peers/linalg_peers.py)
#   scripts/gpu.sh sparse     bench_sparse (sparse vs dense gradient accumulation)
#   scripts/gpu.sh peers      the LibTorch engine-overhead peer, CPU and CUDA
#   scripts/gpu.sh pinn       the PINN step, eager and graphed, side by side with
#                             PyTorch eager, torch.cuda.graph and JAX jit
#   scripts/gpu.sh train      the PINN training step with Adam (B = 1024 and 8192),
#                             the same peers, and torch.compile's attempt
#   scripts/gpu.sh optim      optimizer steps (Adam, RMSprop, Adagrad, Adamax, NAdam, RAdam)
#                             and clip_grad_norm_ over 100 parameters, ours and PyTorch's
#                             foreach and fused (launches per step, us per step)
#   scripts/gpu.sh profile    per-kernel GPU time of one replay of the graphed PINN
#                             step, ours and PyTorch's (ncu, graph nodes one by one;
#                             PROFILE_ARGS go to pinn_step, e.g. "--laplacian taylor")
#   scripts/gpu.sh lprofile   per-kernel GPU time of one call of the linalg workloads
#                             (LPROFILE: "gp_grad:4096 chol+grad:10000" by default),
#                             tapegrad, PyTorch and JAX (ncu; LPROFILE_WHO=tapegrad: ours only)
#   scripts/gpu.sh python     the Python tests (PyTorch and JAX zero copy on CUDA) and
#                             the cost of crossing the boundary (bench/peers/interop_peers.py)
#   scripts/gpu.sh stochastic Hutchinson's Laplacian against the same estimator in JAX
#                             (n = 100 .. 100000; STOCHASTIC_ARGS) and samples/pinn_highdim
#   scripts/gpu.sh cpurows    the CPU PINN step and Laplacian with PyTorch's and JAX's CPU backends
#   scripts/gpu.sh cpuscale   tapegrad's CPU PINN step on 1..16 cores, small arenas off, AVX2 vector math;
#                             one op at its sizes on 1..16 cores; the step against TG_CPU_GRAIN
#   scripts/gpu.sh scaling    time and memory against B, n and width, tapegrad and the peers (PNGs)
#   scripts/gpu.sh laplacian  the Laplacian benchmark side by side with PyTorch
#                             eager, torch.func and JAX (hessian, jacfwd(grad), jet)
#   scripts/gpu.sh ddp        tg::distributed on every GPU (nvidia-h100-x2 / h200-x2): its
#                             tests, pinn_ddp one process per GPU, and the scaling table
#                             against PyTorch DDP (bench/peers/ddp_peers.py; DDP_ARGS, e.g.
#                             "--losses pinn --batch 8192 --frameworks tapegrad_graph,torch_graph")
#   scripts/gpu.sh fno        the FNO-2D training step (64^2 and 128^2; FNO_ARGS, e.g. "--pino"),
#                             tapegrad eager and graphed, PyTorch eager, torch.cuda.graph,
#                             torch.compile and JAX jit (bench/peers/fno_peers.py)
#   scripts/gpu.sh fprofile   per-kernel GPU time of one replay of the graphed FNO step
#                             (FPROFILE_GRIDS, default "64 128"; FNO_ARGS; FPROFILE_WHO="tapegrad jax"
#                             adds JAX's jitted step)
#   scripts/gpu.sh unet       the physics-informed U-Net step (64^2 and 128^2), tapegrad eager and
#                             graphed, PyTorch eager, torch.cuda.graph and JAX jit, and conv2d alone
#                             against PyTorch's cuDNN calls (bench/peers/unet_peers.py)
#   scripts/gpu.sh uprofile   per-kernel GPU time of one replay of the graphed U-Net step and of
#                             one JAX step (UPROFILE_GRIDS, default "64 128"; UPROFILE_WHO, default
#                             "tapegrad jax")
#   scripts/gpu.sh odeint     the neural ODE benchmark (issue 49): tapegrad, torchdiffeq, JAX's odeint
#                             and diffrax (bench/peers/odeint_peers.py)
#   scripts/gpu.sh oprofile   per-kernel GPU time of one odeint call (OPROFILE, default "rk4 rk4-grad
#                             dopri5": one replay of the graphed rk4 solve / its gradient over 2 outputs,
#                             one eager dopri5 solve)
#   scripts/gpu.sh cpu        the Hessian benchmark on the host's CPUs with PyTorch and JAX (CPU),
#                             and its scaling over CPU_THREADS cores (default "1 2 4 8")
#   scripts/gpu.sh hessian    the Hessian benchmark side by side with LibTorch,
#                             PyTorch eager, torch.func and JAX (needs peers built)
# Logs go to $OUT (or ./gpu-logs). Several steps may be given in order.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-logs}
mkdir -p "$OUT"
B=${TG_GPU_BUILD:-build-gpu}  # a path outside the checkout survives a re-sent working tree
TESTS=$B/tests/tapegrad_tests
# racecheck and synccheck: the stream and graph tests. The saved-tensor hooks
# graph test is left to memcheck: its kernels (cuBLAS GEMMs, elementwise,
# copies) are those of the other graph tests, and racecheck takes ~4 minutes
# over its wide layers.
STREAM_TESTS='OdeGpu*:GridGpu*:GraphsGpu*:GraphedTrainingGpu*:OptimGpu*:CudaGpuStreams*:CudaGpu.*Stream*:CudaGpu.Events*:CudaGpuAutograd.GpuNodes*:CudaGpuAutograd.TwoDevices*:CudaGpu.Pinned*:SparseGpu*:DLPackGpu.StreamExchangeRule-GraphsGpu.SavedTensorHooks*:GraphsGpuWholeDevice*'
# ncu_kernels FILE TITLE ROWS GRAPH CMD...: the per-kernel GPU time of what
# CMD brackets with the profiler's start and stop (GRAPH=1: a CUDA graph's
# nodes one by one), into $OUT/FILE.{csv,txt}; prints TITLE and the
# summary's first ROWS rows. --cache-control none: the kernels find what
# their producers left in L2, as they do in a replay (flushing it inflates
# bandwidth-bound ones).
ncu_kernels() {
  local f=$1 title=$2 rows=$3 gp=()
  [ "$4" = 1 ] && gp=(--graph-profiling node)
  shift 4
  ncu --profile-from-start off "${gp[@]}" --cache-control none --metrics gpu__time_duration.sum --csv \
    "$@" > "$OUT/$f.csv" 2> "$OUT/$f.err" || { tail -5 "$OUT/$f.err"; return 1; }
  echo "$title"; python3 scripts/ncu_summary.py "$OUT/$f.csv" | tee "$OUT/$f.txt" | head -"$rows"
  return 0  # head closing the pipe early is not a failure
}
rc=0
for step in "$@"; do
  case $step in
    build)
      { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_WERROR=ON -DTAPEGRAD_NATIVE=ON &&
        cmake --build $B -j"$(nproc)"; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
      echo "build: ok" ;;
    test)
      ctest --test-dir $B -j8 --timeout 300 > "$OUT/ctest.log" 2>&1 || {
        rc=1
        cp $B/Testing/Temporary/LastTest.log "$OUT/ctest_last.log"  # the failed tests' output
        ctest --test-dir $B --rerun-failed --output-on-failure > "$OUT/ctest_failed.log" 2>&1
      }
      grep -E "tests passed|Skipped|Failed|\*\*\*" "$OUT/ctest.log" | head -20 ;;
    sanitize)
      cs=compute-sanitizer
      export TG_TEST_MAX_REPLAYS=3  # graph tests: a few replays each
      # memcheck in 4 processes at once (gtest shards; the GPU has room).
      # The CUDA op table's two gradcheck halves (over 9 minutes each under
      # memcheck) are the memcheck-ops step's.
      MC='CudaGpu*:Graphs*:GraphedTraining*:OptimGpu*:NN*:Sparse*:Determ*:BadInputsGpu*:*OpTable*Cuda:TaylorModeGpu*:DLPack*:GridGpu*:OdeGpu*:Devices/Grid.*CUDA:LibtorchHabitsGpu*:-*OutOfMemory*:*EveryOp*'
      for i in 0 1 2 3; do
        GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i $cs --tool memcheck --error-exitcode 1 $TESTS --gtest_filter="$MC" \
          > "$OUT/memcheck$i.log" 2>&1 &
      done
      for i in 0 1 2 3; do wait -n || rc=1; done
      cat "$OUT"/memcheck[0-3].log > "$OUT/memcheck.log"
      $cs --tool racecheck --error-exitcode 1 $TESTS --gtest_filter="$STREAM_TESTS" \
        > "$OUT/racecheck.log" 2>&1 || rc=1
      $cs --tool synccheck --error-exitcode 1 $TESTS --gtest_filter="$STREAM_TESTS" \
        > "$OUT/synccheck.log" 2>&1 || rc=1
      for t in memcheck racecheck synccheck; do
        echo "$t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|tests? ran|PASSED|FAILED' "$OUT/$t.log" | tr '\n' ' ')"
      done ;;
    memcheck-ops)
      # The CUDA op table's gradcheck halves under memcheck, each half in
      # MEMCHECK_OPS_SHARDS (default 4) processes at once (TG_OP_TABLE_SHARD).
      n=${MEMCHECK_OPS_SHARDS:-4} pids=()
      for h in First Second; do
        for ((k = 0; k < n; k++)); do
          TG_OP_TABLE_SHARD=$k/$n compute-sanitizer --tool memcheck --error-exitcode 1 $TESTS \
            --gtest_filter="Devices/OpTable.GradcheckAndGradgradcheckEveryOp${h}Half/Cuda" \
            > "$OUT/memcheck_ops_${h}_$k.log" 2>&1 & pids+=($!)
        done
      done
      for p in "${pids[@]}"; do wait $p || rc=1; done
      for f in "$OUT"/memcheck_ops_*.log; do
        echo "$(basename $f): $(grep -E 'ERROR SUMMARY|tests? ran|PASSED|FAILED' $f | tr '\n' ' ')"
      done ;;
    sparse)
      $B/bench/bench_sparse --benchmark_min_time=0.3 2>&1 | tee "$OUT/bench_sparse.txt" | grep -E "^BM_|^Run on" ;;
    bench)
      $B/bench/bench_cuda --benchmark_min_time=0.3 2>&1 | tee "$OUT/bench_cuda.txt" | grep -E "^BM_|^Run on"
      # tg::linalg: GP NLML gradient and Hessian, batched Cholesky; the table
      # with PyTorch and JAX (LINALG_ARGS, e.g. "--sizes 1024 --frameworks tapegrad,jax").
      python3 bench/peers/linalg_peers.py --build "$B" --memory ${LINALG_ARGS:-} 2>&1 | tee "$OUT/linalg_peers.txt" ;;
    peers)
      { cmake -S bench/peers -B build-peers \
          -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" &&
        cmake --build build-peers -j"$(nproc)"; } > "$OUT/peers_build.log" 2>&1 || { tail -20 "$OUT/peers_build.log"; rc=1; continue; }
      build-peers/engine_overhead_libtorch cuda | tee "$OUT/peers.txt"
      build-peers/engine_overhead_libtorch | tee -a "$OUT/peers.txt" ;;
    unet)
      python3 bench/peers/unet_peers.py --build "$B" --grids 64 128 2>&1 | tee "$OUT/unet_peers.txt" ;;
    fno)
      python3 bench/peers/fno_peers.py --build "$B" ${FNO_ARGS:-} 2>&1 | tee -a "$OUT/fno_peers.txt" ;;
    fprofile)
      for g in ${FPROFILE_GRIDS:-64 128}; do
        for who in ${FPROFILE_WHO:-tapegrad}; do  # FPROFILE_WHO="tapegrad jax": JAX's jitted step too
          # JAX: its step's kernels one by one (XLA's command buffers, CUDA
          # graphs of its own, off: ncu's node-by-node graph profiling crashes it)
          if [ $who = tapegrad ]; then cmd=($B/bench/fno_step --grid $g --steps 5 --repeats 1 --profile ${FNO_ARGS:-}) graph=1
          else cmd=(env XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= python3 bench/peers/fno_peers.py --frameworks jax --grids $g --profile ${FNO_ARGS:-}) graph=0; fi
          ncu_kernels ncu_fno${g}_$who "== $who $g" ${FPROFILE_ROWS:-45} $graph "${cmd[@]}" || rc=1
        done
      done ;;
    odeint)
      python3 bench/peers/odeint_peers.py --build "$B" 2>&1 | tee "$OUT/odeint_peers.txt" ;;
    oprofile)
      for w in ${OPROFILE:-rk4 rk4-grad dopri5}; do
        times=50; case $w in rk4*) times=2 ;; esac  # rk4: one interval of 21 steps
        ncu_kernels ncu_ode_$w "== tapegrad $w" ${OPROFILE_ROWS:-30} 1 $B/bench/odeint_bench --times $times --profile $w || rc=1
      done ;;
    uprofile)
      for g in ${UPROFILE_GRIDS:-64 128}; do
        for who in ${UPROFILE_WHO:-tapegrad jax}; do
          if [ $who = tapegrad ]; then cmd=($B/bench/unet_step --grid $g --steps 2 --repeats 1 --profile) graph=1
          else cmd=(env XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= python3 bench/peers/unet_peers.py --frameworks jax --grids $g --no-conv --profile) graph=0; fi
          ncu_kernels ncu_unet${g}_$who "== $who $g" ${UPROFILE_ROWS:-40} $graph "${cmd[@]}" || rc=1
        done
      done ;;
    pinn)
      python3 bench/peers/pinn_peers.py ${PINN_ARGS:-} 2>&1 | tee -a "$OUT/pinn_peers.txt" ;;
    train)
      for b in 1024 8192; do
        python3 bench/peers/pinn_peers.py --optimizer adam --batch $b 2>&1 | tee -a "$OUT/pinn_train.txt"
      done
      timeout 100 python3 bench/peers/pinn_peers.py --optimizer adam --frameworks compile 2>&1 |
        grep -E "failed|compile" | tee -a "$OUT/pinn_train.txt" ;;
    optim)
      $B/bench/bench_cuda --benchmark_filter="Adam|Adaptive|ClipGradNorm" --benchmark_min_time=0.3 2>&1 | tee "$OUT/optim.txt" | grep -E "^BM_"
      python3 bench/peers/optim_peers.py 2>&1 | tee -a "$OUT/optim.txt" ;;
    profile)
      for who in tapegrad torch; do
        if [ $who = tapegrad ]; then cmd=($B/bench/pinn_step --no-eager --steps 20 --repeats 1 --profile ${PROFILE_ARGS:-})
        else cmd=(python3 bench/peers/pinn_peers.py --frameworks graph --steps 20 --profile); fi
        ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv \
          "${cmd[@]}" > "$OUT/ncu_$who.csv" 2> "$OUT/ncu_$who.err" || { tail -5 "$OUT/ncu_$who.err"; rc=1; continue; }
        python3 scripts/ncu_summary.py "$OUT/ncu_$who.csv" | tee "$OUT/ncu_$who.txt" | head -40
      done ;;
    lprofile)
      for w in ${LPROFILE:-gp_grad:4096 chol+grad:10000}; do
        name=${w%%:*} size=${w##*:}
        case $name in
          gp_grad) filt="BM_GpNlmlGrad/$size/" ;; gp_hessian) filt="BM_GpHessian/$size/" ;;
          chol) filt="BM_BatchedCholSolveLogdet/$size/" ;; chol+grad) filt="BM_BatchedCholSolveLogdetGrad/$size/" ;;
        esac
        for who in ${LPROFILE_WHO:-tapegrad torch jax}; do
          if [ $who = tapegrad ]; then cmd=(env TG_BENCH_PROFILE=1 $B/bench/bench_linalg --benchmark_filter="$filt" --benchmark_min_time=0.01)
          else cmd=(env XLA_PYTHON_CLIENT_PREALLOCATE=false python3 bench/peers/linalg_peers.py --worker $who --profile
                    --workloads "$name" --sizes "$size" --batch "$size"); fi
          f="ncu_${name/+/_}_${size}_$who" tmp=$(mktemp -d)  # the raw CSV stays out of $OUT (few files come back)
          ncu --profile-from-start off --metrics gpu__time_duration.sum --csv "${cmd[@]}" > "$tmp/$f.csv" 2> "$tmp/$f.err" ||
            { tail -5 "$tmp/$f.err"; rc=1; continue; }
          echo "== $who $name $size"; python3 scripts/ncu_summary.py "$tmp/$f.csv" | tee "$OUT/$f.txt" | head -${LPROFILE_ROWS:-25}
        done
      done ;;
    python)  # the pytest suite with the peers (PyTorch, JAX) present, and the boundary's cost
      PYTHONPATH=$B/python python3 -m pytest -q -p no:cacheprovider python/tests -rs 2>&1 | tee "$OUT/pytest.txt" | tail -15 || rc=1
      PYTHONPATH=$B/python python3 bench/peers/interop_peers.py 2>&1 | tee "$OUT/interop.txt" ;;
    laplacian)
      python3 bench/peers/laplacian_peers.py ${LAPLACIAN_ARGS:-} 2>&1 | tee "$OUT/laplacian_peers.txt" ;;
    ddp)
      $TESTS --gtest_filter='Distributed*' 2>&1 | tee "$OUT/ddp_tests.log" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|Expected|Which is|rank" | head -40
      grep -q "FAILED" "$OUT/ddp_tests.log" && rc=1
      scripts/launch.sh "$(nvidia-smi -L | wc -l)" $B/samples/pinn_ddp --steps 50 2>&1 | tee "$OUT/pinn_ddp.txt" || rc=1
      python3 bench/peers/ddp_peers.py ${DDP_ARGS:-} 2>&1 | tee "$OUT/ddp_peers.txt" ;;
    cpu)  # issue 51 point 3: the Hessian job (B = 256, fp32) on the host's CPUs with PyTorch's and
          # JAX's CPU backends, then its scaling over CPU_THREADS cores (taskset: every framework
          # sizes its pool from the CPUs it may use), and the portable build's GEMM choice against
          # the generic kernels (TG_CPU_GEMM=generic)
      python3 bench/peers/hessian_peers.py --device cpu --build $B --batch 256 --precision fp32 --runs 5 \
        --act ${CPU_ACTS:-silu,relu} --frameworks tapegrad,eager,func,jax --out "$OUT/hessian_cpu.json" \
        2>&1 | tee "$OUT/hessian_cpu.txt" || rc=1
      for t in ${CPU_THREADS:-1 2 4 8}; do
        echo "== $t cores"
        taskset -c 0-$((t - 1)) python3 bench/peers/hessian_peers.py --device cpu --build $B --batch 256 \
          --precision fp32 --runs 5 --act silu --frameworks tapegrad,func,jax --tapegrad-strategies general,taylor \
          2>&1 | tee "$OUT/hessian_cpu_$t.txt" | grep -E "^\| silu" || rc=1
      done
      echo "== TG_CPU_GEMM=generic, every core"
      TG_CPU_GEMM=generic $B/bench/hessian --device cpu --act silu --strategy general,taylor 2>&1 | tail -4 ;;
    cpurows)  # issue 51 point 3: the PINN step (B = 1024, Adam) and the Laplacian (B = 256) on the host's
              # CPUs against PyTorch's and JAX's CPU backends on every core, then on CPU_ROW_THREADS cores (taskset)
      python3 bench/peers/pinn_peers.py --device cpu --build $B --optimizer adam --batch 1024 --steps 20 \
        --frameworks tapegrad,taylor,eager,jax 2>&1 | tee "$OUT/pinn_cpu.txt" || rc=1
      python3 bench/peers/laplacian_peers.py --device cpu --build $B --batch 256 --runs 5 2>&1 |
        tee "$OUT/laplacian_cpu.txt" || rc=1
      for t in ${CPU_ROW_THREADS:-}; do  # e.g. "1 4"
        echo "== $t cores"
        taskset -c 0-$((t - 1)) python3 bench/peers/pinn_peers.py --device cpu --build $B --optimizer adam \
          --batch 1024 --steps 10 --frameworks tapegrad,taylor,jax 2>&1 | tee "$OUT/pinn_cpu_$t.txt" | grep -E "^\|" || rc=1
        taskset -c 0-$((t - 1)) python3 bench/peers/laplacian_peers.py --device cpu --build $B --batch 256 --runs 3 \
          --frameworks tapegrad,jax_fwdrev,jax_jet 2>&1 | tee "$OUT/laplacian_cpu_$t.txt" | grep -E "^\||^lap" || rc=1
      done ;;
    cpuscale)  # issue 51 point 3: tapegrad's CPU PINN step (B = 1024, Adam) on CPU_SCALE_THREADS cores (taskset),
               # as built, with the small arenas off (TG_CPU_SMALL_ARENAS=0) and with AVX2 vector math
      for t in ${CPU_SCALE_THREADS:-1 2 4 8 16}; do
        for v in default TG_CPU_SMALL_ARENAS=0 TG_CPU_VMATH=avx2; do
          for lap in backward taylor; do
            e=(); [ $v != default ] && e=("$v")
            ms=$(env "${e[@]}" taskset -c 0-$((t - 1)) $B/bench/pinn_step --device cpu --optimizer adam --batch 1024 \
              --steps 20 --laplacian $lap | grep -E "tapegrad eager" | awk '{print $3}')
            echo "pinn cpu: $t cores, $v, $lap: $ms ms/step"
          done
        done
      done 2>&1 | tee "$OUT/cpuscale.txt"
      # one op at the step's sizes ([1024, 64]) on 1..16 cores, and the step on every core against TG_CPU_GRAIN
      for t in ${CPU_SCALE_THREADS:-1 2 4 8 16}; do
        echo "== $t cores"
        taskset -c 0-$((t - 1)) $B/bench/bench_elementwise --benchmark_filter=Step --benchmark_min_time=0.1 2>&1 | grep -E "^BM_"
      done 2>&1 | tee "$OUT/cpuscale_ops.txt"
      for g in ${CPU_GRAINS:-8192 16384 32768 65536}; do
        for lap in backward taylor; do
          ms=$(TG_CPU_GRAIN=$g $B/bench/pinn_step --device cpu --optimizer adam --batch 1024 --steps 20 --laplacian $lap |
            grep -E "tapegrad eager" | awk '{print $3}')
          echo "pinn cpu: every core, TG_CPU_GRAIN=$g, $lap: $ms ms/step"
        done
      done 2>&1 | tee "$OUT/cpuscale_grain.txt" ;;
    scaling)  # issue 51 point 7: the Hessian job, the Laplacian and the PINN step swept over B, n and width,
              # tapegrad and the peers (bench/peers/scaling.py; SCALING_ARGS, e.g. "--sweeps pinn_b --points 2")
      # A device call returns at most 8 files: the points go back as one archive (docs/img/scaling holds them).
      # One call has room for about one sweep of the Laplacian (~90 s a point) or two of the others.
      python3 bench/peers/scaling.py --build $B --out "$OUT/scaling" ${SCALING_ARGS:-} 2>&1 | tee "$OUT/scaling.txt"
      tar -C "$OUT" -czf "$OUT/scaling.tgz" scaling && rm -rf "$OUT/scaling" ;;
    stochastic)  # issue 51 point 5: Hutchinson's Laplacian against the same estimator in JAX, n = 100 .. 100000,
                 # and the 1000-dimensional PINN sample
      python3 bench/peers/stochastic_peers.py --build $B ${STOCHASTIC_ARGS:-} --json "$OUT/stochastic.json" 2>&1 |
        tee "$OUT/stochastic_peers.txt" || rc=1
      $B/samples/pinn_highdim 2>&1 | tee "$OUT/pinn_highdim.txt" || rc=1 ;;
    hessian)
      python3 bench/peers/hessian_peers.py ${HESSIAN_ARGS:-} 2>&1 | tee "$OUT/hessian_peers.txt" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
exit $rc
