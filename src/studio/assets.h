#pragma once
// The front end compiled into the binary: tools/embed_assets.cpp writes the table from Vite's
// dist/ folder at build time (or a page saying the front end was not built).
#include <cstddef>

namespace tessera::studio {

struct Asset {
  const char* path;  // "/index.html", "/assets/index-1a2b.js"
  const char* content_type;
  const unsigned char* data;
  size_t size;
};

extern const Asset kAssets[];
extern const size_t kAssetCount;

}  // namespace tessera::studio
