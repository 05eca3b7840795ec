/* exp, log, tanh, sqrt and fabs for float and float vectors, as clg_exp(x) etc.
 *
 * Why not the builtins directly: on a pocl whose compiler targets a CPU without AVX-512 while
 * the device reports 16-float vectors (PyPI's pocl 3.0-rc2, LLVM 14, on a Zen 4 it compiles
 * for as znver3), a float16 builtin call is an ABI mismatch: exp(float16) crashed the process
 * and log(float16) stopped code generation ("Cannot select ... v16f32"). On such a device
 * clglow builds every program with -DCLG_SPLIT16=1 (runtime/device.py) and the float16
 * overloads below call the builtin on the two float8 halves; elsewhere they are the builtin. */
#ifndef CLG_VMATH_H
#define CLG_VMATH_H
#ifndef CLG_SPLIT16
#define CLG_SPLIT16 0
#endif

/* NAME is spelled out: pocl's headers define the builtins as macros (exp -> _cl_exp), and a
 * name pasted from an expanded argument would change with them. */
#if CLG_SPLIT16
#define CLG_VMATH16(NAME, F) \
    inline float16 __attribute__((overloadable)) NAME(const float16 x) { return (float16)(F(x.lo), F(x.hi)); }
#else
#define CLG_VMATH16(NAME, F) \
    inline float16 __attribute__((overloadable)) NAME(const float16 x) { return F(x); }
#endif
#define CLG_VMATH(NAME, F)                                                                  \
    inline float __attribute__((overloadable)) NAME(const float x) { return F(x); }         \
    inline float4 __attribute__((overloadable)) NAME(const float4 x) { return F(x); }       \
    inline float8 __attribute__((overloadable)) NAME(const float8 x) { return F(x); }       \
    CLG_VMATH16(NAME, F)

CLG_VMATH(clg_exp, exp)
CLG_VMATH(clg_log, log)
CLG_VMATH(clg_tanh, tanh)
CLG_VMATH(clg_sqrt, sqrt)
CLG_VMATH(clg_fabs, fabs)

#endif
