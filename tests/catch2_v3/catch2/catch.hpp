// Catch2 v3 under Catch2 v2's name, so that every test file includes <catch2/catch.hpp> with either.
//
// The Makefile puts tests/catch2_v3 on the include path only when the Catch2 it found is v3
// (tools/find_catch2.sh); with v2 the real catch2/catch.hpp is used. Below: the v2 names the tests
// use that v3 moved or renamed. tests/main.cpp handles the one difference in the test registry.
#pragma once

#include <catch2/catch_all.hpp>

#include <string>

using Catch::Approx;

namespace Catch {

using TestEventListenerBase = EventListenerBase;

/// v2's string matcher `Catch::Contains` (v3: Catch::Matchers::ContainsSubstring).
inline Matchers::StringContainsMatcher Contains(const std::string& text,
                                                CaseSensitive sensitivity = CaseSensitive::Yes) {
    return Matchers::ContainsSubstring(text, sensitivity);
}

}  // namespace Catch
