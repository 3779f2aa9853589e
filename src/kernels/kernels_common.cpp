// Definitions of vlpar::kernels compiled once (not per CPU path): configuration checks that are members of public
// types (a member must be defined in its class's namespace, not in src/kernels/cpu's per-path namespaces).
#include <cmath>

#include "vlpar/kernels/optimizer.hpp"

namespace vlpar {

Status AdamWConfig::validate() const {
  VLPAR_CHECK(lr >= 0.f && std::isfinite(lr), "adamw: lr must be finite and >= 0, got {}", lr);
  VLPAR_CHECK(beta1 >= 0.f && beta1 < 1.f, "adamw: beta1 must be in [0, 1), got {}", beta1);
  VLPAR_CHECK(beta2 >= 0.f && beta2 < 1.f, "adamw: beta2 must be in [0, 1), got {}", beta2);
  VLPAR_CHECK(eps > 0.f, "adamw: eps must be positive, got {}", eps);
  VLPAR_CHECK(weight_decay >= 0.f, "adamw: weight_decay must be >= 0, got {}", weight_decay);
  return Status::Ok();
}

}  // namespace vlpar
