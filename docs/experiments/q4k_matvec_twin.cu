// A CUDA twin of sluice's single-token integer-dot Q4_K matvec (include/matvec_q8_body.wgsl
// with dtype/q4_k_dp.wgsl): y[r] = sum_k W[r, k] x[k], W in sluice's GPU layout of Q4_K
// (per row: nb * 8 uint4 of nibbles, unit u = 8 s + 2 c + h holds the low nibbles of
// elements 256 s + 64 c + 16 h + i and the high ones of + 32; then nb uint4 of
// d | dmin (f16) and the 12 scale bytes), x quantized to int8 per block of 32 with
// (d, d * sum of the first 16 q, d * sum of the last 16 q). Variants (template knobs):
//   TPR lanes per row group, NR rows per group, XSTEP: every block quantizes x from floats
//   into shared memory first (as sluice does) or reads it pre-quantized from global memory,
//   UNR: units per lane whose loads are issued before any is used.
// Timed as a chain of launches in one CUDA graph over rotating weight copies (> L2: what
// decode sees), mean per launch (an empty kernel's chain is printed beside).
// Checked: every variant's y against variant 0's (max relative difference printed).
//
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/q4k docs/experiments/q4k_matvec_twin.cu && /tmp/q4k
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
#include <cuda_fp16.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

// (scale, min, scale, min) of sub-blocks 2c, 2c + 1 from the 12 scale bytes in m.y, m.z,
// m.w (ggml's get_scale_min_k4, as include/quant_k_fields.wgsl computes it: no branches).
__device__ __forceinline__ float4 scale_min2(uint4 m, int c) {
    unsigned sh = 16u * (c & 1);
    unsigned y = (m.y >> sh) & 0xFFFFu, z = (m.z >> sh) & 0xFFFFu, w = (m.w >> sh) & 0xFFFFu;
    bool hi = c >= 2;
    unsigned sc = hi ? ((w & 0x0F0Fu) | ((y >> 2) & 0x3030u)) : (y & 0x3F3Fu);
    unsigned mn = hi ? (((w >> 4) & 0x0F0Fu) | ((z >> 2) & 0x3030u)) : (z & 0x3F3Fu);
    return make_float4((float)(sc & 255u), (float)(mn & 255u), (float)(sc >> 8), (float)(mn >> 8));
}

__device__ __forceinline__ int dot16(uint4 a, const int* x) {
    int s = __dp4a((int)a.x, x[0], 0);
    s = __dp4a((int)a.y, x[1], s);
    s = __dp4a((int)a.z, x[2], s);
    return __dp4a((int)a.w, x[3], s);
}

// Unit u of a row (q: its nibbles, m: its block's meta) dotted with quantized x.
__device__ __forceinline__ float unit_dot(uint4 q, uint4 m, int u, const int* xq, const float4* xd) {
    int s = u / 8, c = (u % 8) / 2, h = u % 2;
    float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&m.x));
    float4 sm = scale_min2(m, c);
    uint4 lo = make_uint4(q.x & 0x0F0F0F0Fu, q.y & 0x0F0F0F0Fu, q.z & 0x0F0F0F0Fu, q.w & 0x0F0F0F0Fu);
    uint4 hi = make_uint4((q.x >> 4) & 0x0F0F0F0Fu, (q.y >> 4) & 0x0F0F0F0Fu, (q.z >> 4) & 0x0F0F0F0Fu, (q.w >> 4) & 0x0F0F0F0Fu);
    int e0 = 256 * s + 64 * c + 16 * h;
    int il = dot16(lo, xq + e0 / 4);
    int ih = dot16(hi, xq + e0 / 4 + 8);
    float4 xl = xd[(256 * s + 64 * c) / 32], xh = xd[(256 * s + 64 * c) / 32 + 1];
    float sl = h ? xl.z : xl.y, sh = h ? xh.z : xh.y;
    return dm.x * (sm.x * xl.x * (float)il + sm.z * xh.x * (float)ih) - dm.y * (sm.y * sl + sm.w * sh);
}

__device__ __forceinline__ uint4 ldw(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

constexpr int WG = 256;
constexpr int MAXC = 9728;

template <int TPR, int NR, bool XSTEP, int UNR, bool PRE = false>
__global__ void __launch_bounds__(WG) mv(const uint4* __restrict__ W, const float* __restrict__ xf,
                                          const int* __restrict__ xqg, const float4* __restrict__ xdg,
                                          float* __restrict__ y, int rows, int cols) {
    __shared__ int xqs[MAXC / 4];
    __shared__ float4 xds[MAXC / 32];
    __shared__ float red[WG / 32][NR];
    const int li = threadIdx.x, nb = cols / 256, stride = nb * 9, units = cols / 32;
    const int groups = WG / TPR, grp = li / TPR, lane = li % TPR;
    const int row0 = (blockIdx.x * groups + grp) * NR;
    const int* xq = xqg;
    const float4* xd = xdg;
    uint4 q[UNR][NR], m[UNR][NR];
    const int last = rows - 1;
    auto load = [&](int u0) {
#pragma unroll
        for (int j = 0; j < UNR; j++) {
            int u = min(u0 + j * TPR, units - 1);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const uint4* rb = W + (size_t)min(row0 + r, last) * stride;
                q[j][r] = ldw(rb + u);
                m[j][r] = ldw(rb + nb * 8 + u / 8);
            }
        }
    };
    // PRE: the first pass's weights requested before the x step (held across its barrier).
    if (PRE) load(lane);
    if (XSTEP) {
        for (int b = li; b < cols / 32; b += WG) {
            float v[32];
            float amax = 0.f;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float4 t = reinterpret_cast<const float4*>(xf)[8 * b + k];
                v[4 * k] = t.x; v[4 * k + 1] = t.y; v[4 * k + 2] = t.z; v[4 * k + 3] = t.w;
                amax = fmaxf(amax, fmaxf(fmaxf(fabsf(t.x), fabsf(t.y)), fmaxf(fabsf(t.z), fabsf(t.w))));
            }
            float d = amax / 127.f, id = amax > 0.f ? 127.f / amax : 0.f;
            int s0 = 0, s1 = 0;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                unsigned w = 0;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    int q = (int)fminf(fmaxf(rintf(v[4 * k + j] * id), -127.f), 127.f);
                    if (k < 4) s0 += q; else s1 += q;
                    w |= ((unsigned)q & 255u) << (8 * j);
                }
                xqs[8 * b + k] = (int)w;
            }
            xds[b] = make_float4(d, d * s0, d * s1, 0.f);
        }
        __syncthreads();
        xq = xqs;
        xd = xds;
    }
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.f;
    if (row0 < rows) {
        for (int u0 = lane; u0 < units; u0 += TPR * UNR) {
            if (!PRE || u0 != lane) load(u0);
#pragma unroll
            for (int j = 0; j < UNR; j++) {
                int u = u0 + j * TPR;
                if (u < units) {
#pragma unroll
                    for (int r = 0; r < NR; r++) acc[r] += unit_dot(q[j][r], m[j][r], u, xq, xd);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (TPR <= 32) {
        // Groups of TPR lanes inside a warp: lane 0 of each group writes (TPR must be 32 here).
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < NR; r++) if (row0 + r < rows) y[row0 + r] = acc[r];
        return;
    }
    if (li % 32 == 0)
#pragma unroll
        for (int r = 0; r < NR; r++) red[li / 32][r] = acc[r];
    __syncthreads();
    if (li < groups * NR) {
        int g = li / NR, r = li % NR;
        float s = 0.f;
        for (int k = 0; k < TPR / 32; k++) s += red[g * (TPR / 32) + k][r];
        int rr = blockIdx.x * groups * NR + li;
        if (rr < rows) y[rr] = s;
    }
}

__global__ void empty() {}

// A pure read of n16 uint4 (grid-stride, UNR loads in flight per thread): the floor of a
// kernel that only streams its bytes once.
template <int UNR>
__global__ void __launch_bounds__(WG) stream(const uint4* __restrict__ p, size_t n16, float* out) {
    unsigned acc = 0;
    size_t stride = (size_t)gridDim.x * WG;
    for (size_t i = blockIdx.x * WG + threadIdx.x; i < n16; i += stride * UNR) {
        uint4 v[UNR];
#pragma unroll
        for (int j = 0; j < UNR; j++) v[j] = i + j * stride < n16 ? ldw(p + i + j * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < UNR; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    if (acc == 0x12345678u) out[0] = 1.f;
}

// Warps walk row groups of NR rows (grid-stride over the whole matrix, a grid sized to the
// GPU), x pre-quantized in global memory: no shared memory, no barrier, no tail wave.
template <int NR>
__global__ void __launch_bounds__(WG) mvp(const uint4* __restrict__ W, const float* __restrict__ xf,
                                           const int* __restrict__ xq, const float4* __restrict__ xd,
                                           float* __restrict__ y, int rows, int cols) {
    const int nb = cols / 256, stride = nb * 9, units = cols / 32;
    const int lane = threadIdx.x % 32;
    const int warp = blockIdx.x * (WG / 32) + threadIdx.x / 32, nwarps = gridDim.x * (WG / 32);
    const int ngroups = (rows + NR - 1) / NR;
    for (int g = warp; g < ngroups; g += nwarps) {
        const int row0 = g * NR;
        float acc[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) acc[r] = 0.f;
        for (int u = lane; u < units; u += 32) {
            uint4 q[NR], m[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const uint4* rb = W + (size_t)min(row0 + r, rows - 1) * stride;
                q[r] = ldw(rb + u);
                m[r] = ldw(rb + nb * 8 + u / 8);
            }
#pragma unroll
            for (int r = 0; r < NR; r++) acc[r] += unit_dot(q[r], m[r], u, xq, xd);
        }
#pragma unroll
        for (int r = 0; r < NR; r++)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < NR; r++) if (row0 + r < rows) y[row0 + r] = acc[r];
    }
}

struct Shape { const char* name; int rows, cols; };

// Mean µs per launch of `reps` launches of launch(i), captured into one CUDA graph (no
// host launch cost between them), after one untimed replay.
template <class F>
float graph_us(int reps, F launch) {
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < reps; i++) launch(i, st);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(st);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms * 1000 / reps;
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    Shape shapes[] = {{"4b gate", 9728, 2560}, {"4b gate_up(2x)", 19456, 2560}, {"4b qkv", 6144, 2560},
                      {"4b o", 2560, 4096}, {"4b down", 2560, 9728}};
    {
        float us = graph_us(reps, [&](int, cudaStream_t st) { empty<<<132, 256, 0, st>>>(); });
        printf("empty kernel chain (graph): %.2f us per launch\n", us);
    }
    // Streaming floor: one kernel reading MB megabytes, cold (rotating copies), grid 132 x k.
    for (double mb : {4.7, 8.85, 14.0, 20.0, 28.0}) {
        size_t n16 = (size_t)(mb * 1e6) / 16;
        int copies = (int)std::max<size_t>(2, (512ull << 20) / (n16 * 16) + 1);
        std::vector<uint4*> P(copies);
        for (auto& q : P) { CK(cudaMalloc(&q, n16 * 16)); CK(cudaMemset(q, 1, n16 * 16)); }
        float* o;
        CK(cudaMalloc(&o, 4));
        for (int k : {8}) {
            float us = graph_us(reps, [&](int i, cudaStream_t st) { stream<4><<<132 * k, WG, 0, st>>>(P[i % copies], n16, o); });
            printf("stream %6.2f MB grid 132x%-2d %7.2f us %6.0f GB/s\n", mb, k, us, n16 * 16 / us / 1e3);
        }
        for (auto q : P) cudaFree(q);
        cudaFree(o);
    }
    for (auto& sh : shapes) {
        size_t nb = sh.cols / 256, rowb = nb * 144, bytes = rowb * sh.rows;
        int copies = (int)std::max<size_t>(2, (256ull << 20) / bytes + 1);
        std::vector<unsigned char> hw(bytes);
        unsigned s = 12345;
        for (auto& b : hw) { s = s * 1664525u + 1013904223u; b = s >> 24; }
        // Sane f16 d / dmin in every meta word.
        for (int r = 0; r < sh.rows; r++)
            for (size_t b = 0; b < nb; b++) {
                __half d = __float2half(0.01f + 0.001f * (r % 7)), dm = __float2half(0.005f);
                memcpy(&hw[r * rowb + nb * 128 + b * 16], &d, 2);
                memcpy(&hw[r * rowb + nb * 128 + b * 16 + 2], &dm, 2);
            }
        std::vector<uint4*> W(copies);
        for (auto& w : W) { CK(cudaMalloc(&w, bytes)); CK(cudaMemcpy(w, hw.data(), bytes, cudaMemcpyHostToDevice)); }
        std::vector<float> hx(sh.cols);
        for (int i = 0; i < sh.cols; i++) hx[i] = sinf(0.37f * i);
        float *xf, *y;
        int* xq;
        float4* xd;
        CK(cudaMalloc(&xf, sh.cols * 4));
        CK(cudaMalloc(&y, sh.rows * 4));
        CK(cudaMalloc(&xq, sh.cols));
        CK(cudaMalloc(&xd, sh.cols / 32 * 16));
        CK(cudaMemcpy(xf, hx.data(), sh.cols * 4, cudaMemcpyHostToDevice));
        // Pre-quantized x: one XSTEP run's shared arrays are not visible, so quantize on the host.
        {
            std::vector<int> q(sh.cols / 4);
            std::vector<float4> dd(sh.cols / 32);
            for (int b = 0; b < sh.cols / 32; b++) {
                float amax = 0;
                for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(hx[32 * b + k]));
                float d = amax / 127.f, id = amax > 0 ? 127.f / amax : 0;
                int s0 = 0, s1 = 0;
                for (int k = 0; k < 8; k++) {
                    unsigned w = 0;
                    for (int j = 0; j < 4; j++) {
                        int v = (int)fminf(fmaxf(rintf(hx[32 * b + 4 * k + j] * id), -127.f), 127.f);
                        (k < 4 ? s0 : s1) += v;
                        w |= ((unsigned)v & 255u) << (8 * j);
                    }
                    q[8 * b + k] = (int)w;
                }
                dd[b] = make_float4(d, d * s0, d * s1, 0);
            }
            CK(cudaMemcpy(xq, q.data(), sh.cols, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(xd, dd.data(), sh.cols / 32 * 16, cudaMemcpyHostToDevice));
        }
        std::vector<float> ref;
        auto run = [&](const char* name, auto kern, int tpr, int nr) {
            int per = WG / tpr * nr, grid = (sh.rows + per - 1) / per;
            float us = graph_us(reps, [&](int i, cudaStream_t st) { kern<<<grid, WG, 0, st>>>(W[i % copies], xf, xq, xd, y, sh.rows, sh.cols); });
            // Hot: one copy (L2-resident where it fits).
            float hot = graph_us(reps, [&](int, cudaStream_t st) { kern<<<grid, WG, 0, st>>>(W[0], xf, xq, xd, y, sh.rows, sh.cols); });
            std::vector<float> hy(sh.rows);
            kern<<<grid, WG>>>(W[0], xf, xq, xd, y, sh.rows, sh.cols);
            CK(cudaMemcpy(hy.data(), y, sh.rows * 4, cudaMemcpyDeviceToHost));
            if (ref.empty()) ref = hy;
            double md = 0, mr = 0;
            for (int r = 0; r < sh.rows; r++) { md = fmax(md, fabs(hy[r] - ref[r])); mr = fmax(mr, fabs(ref[r])); }
            cudaFuncAttributes at;
            cudaFuncGetAttributes(&at, kern);
            printf("%-15s %-22s grid %5d regs %3d  cold %7.2f us %6.0f GB/s  hot %7.2f us  maxdiff %.1e\n", sh.name, name,
                   grid, at.numRegs, us, bytes / us / 1e3, hot, md / (mr + 1e-30));
        };
        auto runp = [&](const char* name, auto kern, int grid) {
            float us = graph_us(reps, [&](int i, cudaStream_t st) { kern<<<grid, WG, 0, st>>>(W[i % copies], xf, xq, xd, y, sh.rows, sh.cols); });
            std::vector<float> hy(sh.rows);
            kern<<<grid, WG>>>(W[0], xf, xq, xd, y, sh.rows, sh.cols);
            CK(cudaMemcpy(hy.data(), y, sh.rows * 4, cudaMemcpyDeviceToHost));
            double md = 0, mr = 0;
            for (int r = 0; r < sh.rows; r++) { md = fmax(md, fabs(hy[r] - ref[r])); mr = fmax(mr, fabs(ref[r])); }
            cudaFuncAttributes at;
            cudaFuncGetAttributes(&at, kern);
            printf("%-15s %-22s grid %5d regs %3d  cold %7.2f us %6.0f GB/s  maxdiff %.1e\n", sh.name, name, grid,
                   at.numRegs, us, bytes / us / 1e3, md / (mr + 1e-30));
        };
        run("t32 r4 xstep u1", mv<32, 4, true, 1>, 32, 4);
        run("t64 r4 xstep u1", mv<64, 4, true, 1>, 64, 4);
        run("t128 r4 xq8 u1", mv<128, 4, false, 1>, 128, 4);
        run("t32 r4 xstep u3", mv<32, 4, true, 3>, 32, 4);
        run("t32 r2 xstep u3", mv<32, 2, true, 3>, 32, 2);
        run("t32 r1 xstep u3", mv<32, 1, true, 3>, 32, 1);
        run("t64 r4 xstep u2", mv<64, 4, true, 2>, 64, 4);
        run("t64 r2 xstep u2", mv<64, 2, true, 2>, 64, 2);
        run("t128 r2 xstep u1", mv<128, 2, true, 1>, 128, 2);
        run("t32 r4 pre u3", mv<32, 4, true, 3, true>, 32, 4);
        run("t32 r2 pre u3", mv<32, 2, true, 3, true>, 32, 2);
        run("t64 r2 pre u2", mv<64, 2, true, 2, true>, 64, 2);
        run("t64 r4 pre u2", mv<64, 4, true, 2, true>, 64, 4);
        run("t32 r4 xq8 u3", mv<32, 4, false, 3>, 32, 4);
        run("t32 r2 xq8 u3", mv<32, 2, false, 3>, 32, 2);
        run("t32 r2 xq8 u4", mv<32, 2, false, 4>, 32, 2);
        run("t64 r2 xq8 u2", mv<64, 2, false, 2>, 64, 2);
        run("t64 r4 xq8 u2", mv<64, 4, false, 2>, 64, 4);
        run("t128 r2 xq8 u1", mv<128, 2, false, 1>, 128, 2);
        run("t128 r2 xq8 u2", mv<128, 2, false, 2>, 128, 2);
        run("t128 r2 xq8 u3", mv<128, 2, false, 3>, 128, 2);
        run("t128 r1 xq8 u3", mv<128, 1, false, 3>, 128, 1);
        run("t128 r4 xq8 u3", mv<128, 4, false, 3>, 128, 4);
        run("t128 r2 xstep u3", mv<128, 2, true, 3>, 128, 2);
        run("t128 r2 pre u3", mv<128, 2, true, 3, true>, 128, 2);
        for (int k : {6}) {
            char nm[64];
            snprintf(nm, sizeof nm, "persist r1 132x%d", k);
            runp(nm, mvp<1>, 132 * k);
            snprintf(nm, sizeof nm, "persist r2 132x%d", k);
            runp(nm, mvp<2>, 132 * k);
            snprintf(nm, sizeof nm, "persist r4 132x%d", k);
            runp(nm, mvp<4>, 132 * k);
        }
        for (auto w : W) cudaFree(w);
        cudaFree(xf); cudaFree(y); cudaFree(xq); cudaFree(xd);
    }
    return 0;
}
