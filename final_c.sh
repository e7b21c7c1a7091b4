set -x
scripts/gpu.sh build test || exit 1
T=build-gpu/tests/tapegrad_tests
$T --gtest_filter='DistributedGpu.DataParallelGradients*:IndexGpu*:SparseGpu*' 2>&1 | grep -E "OK|FAILED|Failure|PASSED|expected|message" | head -20
TG_TEST_MAX_REPLAYS=3 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 $T --gtest_filter='IndexGpu*:SparseGpu*:DistributedGpu.DataParallelGradients*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED"
for b in 16 25600; do timeout 70 python3 bench/peers/ddp_peers.py --losses pinn --batch 8192 --bucket-kb $b --frameworks tapegrad_graph --bucket-view --timeout 30 2>&1 | grep -E "^\||longest"; done
timeout 70 python3 bench/peers/ddp_peers.py --losses pinn --batch 1024 --bucket-kb 25600 --frameworks tapegrad_graph --bucket-view --timeout 30 2>&1 | grep -E "^\||longest"
timeout 70 python3 bench/peers/ddp_peers.py --losses pinn --batch 8192 --bucket-kb 25600 --frameworks tapegrad_graph --timeout 30 2>&1 | grep -E "^\||longest"
