/* One δ-Mem decode step (one token, token write granularity) for a batch, fused into one call.
 *
 * The same equations as DeltaMemLayer._decode_step in memory.py, per batch row b and state head h:
 *   z = W_in x_b + bias                        (q, k, v, β[, λ] features, (n_groups, H, r))
 *   q̃ = tanh(z_q)/max(‖tanh(z_q)‖, 1e-12), k̃ likewise, ṽ = z_v, β = σ(z_β), λ = 1 − β or σ(z_λ)
 *   reads = (α/r) S q̃                          (read before write)
 *   S' = keep ⊙ S + (write ⊙ ṽ − erase ⊙ S k̃) k̃ᵀ (keep, erase, write per update mode)
 *   delta_t = W_Δt reads                        (for up to four corrected projections)
 * Plain C99 with no dependency but libm, compiled on first use by decode_c.py. */
#include <math.h>
#include <stdint.h>

/* What stays fixed across decode steps (mirrored by the ctypes Structure Plan in decode_c.py): the
 * weights, the state, the scratch, reads and correction buffers and the sizes. Built once per layer in
 * Python, so a step passes two arguments instead of thirty. */
typedef struct {
  const void *w_in, *b_in; /* (n_groups * heads * r, d) and (n_groups * heads * r,) */
  void *z;                 /* scratch, n_groups * heads * r */
  void *state;             /* (batch, heads, r, r), updated in place */
  void *reads;             /* (batch, heads * r), the scaled reads */
  int64_t batch, d, heads, r, n_groups, mode, couple;
  double scale;            /* α / r */
  const void *dw[4];       /* W_Δ of up to four corrected projections, (out, heads * r); NULL: unused */
  void *dout[4];           /* their corrections, (batch, out) */
  int64_t dn[4];           /* out */
} dm_plan;

enum { STANDARD = 0, LAMBDA_OUTSIDE = 1, NO_LAMBDA = 2 };

/* Eight partial sums: the compiler can vectorise them without -ffast-math. */
#define DEFINE_DOT(NAME, T)                                                          \
  static T NAME(const T *a, const T *b, int64_t n) {                                    \
    T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                               \
    int64_t c = 0;                                                                      \
    for (; c + 8 <= n; c += 8)                                                       \
      for (int u = 0; u < 8; u++) s[u] += a[c + u] * b[c + u];                       \
    T acc = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));       \
    for (; c < n; c++) acc += a[c] * b[c];                                           \
    return acc;                                                                      \
  }

#define DEFINE_STEP(SUFFIX, T, TANH, EXP, SQRT)                                                        \
  DEFINE_DOT(dot_##SUFFIX, T)                                                                          \
  void dm_decode_step_##SUFFIX(const dm_plan *p, const T *x) {                                         \
    const int64_t batch = p->batch;                                                                    \
    T *state = (T *)p->state, *reads = (T *)p->reads;                                                  \
    const int64_t d = p->d, heads = p->heads, r = p->r, hr = heads * r, n = p->n_groups * hr;         \
    const T *w_in = (const T *)p->w_in, *b_in = (const T *)p->b_in;                                    \
    T *z = (T *)p->z;                                                                                  \
    for (int64_t b = 0; b < batch; b++) {                                                              \
      for (int64_t j = 0; j < n; j++) z[j] = dot_##SUFFIX(w_in + j * d, x + b * d, d) + b_in[j];      \
      T *rb = reads + b * hr;                                                                          \
      for (int64_t h = 0; h < heads; h++) {                                                            \
        T *q = z + h * r, *k = z + hr + h * r;                                                         \
        const T *v = z + 2 * hr + h * r, *zb = z + 3 * hr + h * r, *zl = z + 4 * hr + h * r;          \
        T nq = 0, nk = 0;                                                                              \
        for (int64_t i = 0; i < r; i++) {                                                              \
          q[i] = TANH(q[i]);                                                                           \
          k[i] = TANH(k[i]);                                                                           \
          nq += q[i] * q[i];                                                                           \
          nk += k[i] * k[i];                                                                           \
        }                                                                                              \
        nq = SQRT(nq);                                                                                 \
        nk = SQRT(nk);                                                                                 \
        nq = nq > (T)1e-12 ? nq : (T)1e-12;                                                            \
        nk = nk > (T)1e-12 ? nk : (T)1e-12;                                                            \
        for (int64_t i = 0; i < r; i++) {                                                              \
          q[i] /= nq;                                                                                  \
          k[i] /= nk;                                                                                  \
        }                                                                                              \
        /* in place: row i is read whole (read, sk) before it is written, element by element */      \
        const T *S = state + (b * heads + h) * r * r;                                                  \
        T *S_new = state + (b * heads + h) * r * r;                                                    \
        for (int64_t i = 0; i < r; i++) {                                                              \
          const T *row = S + i * r;                                                                    \
          T read = 0, sk = 0;                                                                          \
          for (int64_t j = 0; j < r; j++) {                                                            \
            read += row[j] * q[j];                                                                     \
            sk += row[j] * k[j];                                                                       \
          }                                                                                            \
          rb[h * r + i] = (T)p->scale * read;                                                          \
          const T beta = 1 / (1 + EXP(-zb[i]));                                                        \
          const T lam = p->couple ? 1 - beta : 1 / (1 + EXP(-zl[i]));                                  \
          const T keep = p->mode == NO_LAMBDA ? 1 : lam;                                               \
          const T erase = p->mode == LAMBDA_OUTSIDE ? lam * beta : beta;                               \
          const T coef = beta * v[i] - erase * sk; /* write = β in every mode */                      \
          for (int64_t j = 0; j < r; j++) S_new[i * r + j] = keep * row[j] + coef * k[j];              \
        }                                                                                              \
      }                                                                                                \
      for (int t = 0; t < 4; t++) {                                                                    \
        const T *w = (const T *)p->dw[t];                                                              \
        T *out = (T *)p->dout[t] + b * p->dn[t];                                                       \
        if (w)                                                                                         \
          for (int64_t o = 0; o < p->dn[t]; o++) out[o] = dot_##SUFFIX(w + o * hr, rb, hr);            \
      }                                                                                                \
    }                                                                                                  \
  }

DEFINE_STEP(f32, float, tanhf, expf, sqrtf)
DEFINE_STEP(f64, double, tanh, exp, sqrt)
