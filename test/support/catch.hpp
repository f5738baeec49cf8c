// Catch2 v2 (Debian 12) and v3 (the GPU machine) behind one include.
#pragma once
#if defined(SOVA_CATCH2_V3)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
