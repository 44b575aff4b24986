#pragma once
// The loss's transform of a raw logit, in double (numerics/loss_spec.hpp: z = scale·r, then the
// softcap c·tanh(z/c) when c > 0): the one host/device copy that the generators (targets drawn
// from softmax(z)), the judge's covariates and the reference's cuda tier share. The certified
// reference's own transform with its error bound (reference/row_math.hpp) and the strategies'
// fp32 transforms are separate on purpose: they are what is being checked.
#include <cmath>

#include "numerics/hd.hpp"

namespace xentlab {

/// z = scale·raw, then softcap·tanh(z/softcap) when softcap > 0 (0 = off).
XL_HD inline double kernel_logit(double raw, double scale, double softcap) {
  double z = scale * raw;
  if (softcap > 0) z = softcap * ::tanh(z / softcap);
  return z;
}

}  // namespace xentlab
