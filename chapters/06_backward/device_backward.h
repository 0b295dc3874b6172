/// @file device_backward.h
/// @brief Chapter 6: every device array of one backward problem, owned together (the program and
/// the tests both use it).
#pragma once

#include <vector>

#include "../../common/attention.h"
#include "../../common/device.h"
#include "flash2_backward.h"

namespace ch6 {

/// Q, K, V, dO (inputs), O and L (from the forward), dQ, dK, dV (outputs) and the D workspace.
struct DeviceBackward {
    fa::AttnShape shape;
    fa::DeviceBuffer<float> Q, K, V, O, L, dO, dQ, dK, dV, Dsum;

    DeviceBackward(const fa::AttnProblem& p, const std::vector<float>& dO_host)
        : shape(p.shape),
          Q(p.Q),
          K(p.K),
          V(p.V),
          O(p.shape.elements()),
          L(p.shape.rows()),
          dO(dO_host),
          dQ(p.shape.elements()),
          dK(p.shape.elements()),
          dV(p.shape.elements()),
          Dsum(p.shape.rows()) {}

    /// The pointers backward() takes.
    BackwardTensors tensors() const {
        return {Q.get(), K.get(), V.get(), O.get(), dO.get(), L.get(), dQ.get(), dK.get(), dV.get(), Dsum.get()};
    }
    /// Fills the outputs and the workspace with NaN, so that anything left unwritten fails a check.
    void poison_outputs() {
        dQ.poison();
        dK.poison();
        dV.poison();
        Dsum.poison();
    }
};

}  // namespace ch6
