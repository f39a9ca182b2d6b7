// Byte sizes as users write them ("64GiB", "512MB", "1073741824") and as the
// reports print them.
#pragma once

#include <kvpool/types.hpp>

#include <string>

namespace kvpool::sim {

// Parses a non-negative size with an optional unit (B, KB/MB/GB/TB powers of
// 1000, KiB/MiB/GiB/TiB powers of 1024; case-insensitive). Throws InputError
// naming `what` and the text.
index_t parse_byte_size(const std::string& text, const std::string& what);

// "64.0 GiB", "416.0 KiB", "12 B".
std::string format_bytes(double bytes);

} // namespace kvpool::sim
