// The embedded front end: files by path; paths without an extension get index.html (the app
// routes on the client).
#include <string_view>

#include "api.h"
#include "assets.h"

namespace tessera::studio {

namespace {

const Asset* find_asset(std::string_view path) {
  for (size_t i = 0; i < kAssetCount; ++i)
    if (path == kAssets[i].path) return &kAssets[i];
  return nullptr;
}

}  // namespace

void add_static_routes(Studio::Impl& s) {
  s.http.Get(R"(/(?!api/).*)", [](const httplib::Request& req, httplib::Response& res) {
    const Asset* a = find_asset(req.path == "/" ? "/index.html" : req.path);
    const bool has_extension = req.path.find('.', req.path.rfind('/')) != std::string::npos;
    if (!a && !has_extension) a = find_asset("/index.html");
    if (!a) {
      res.status = 404;
      return;
    }
    // Vite names bundles by content hash: they never change under the same name.
    if (req.path.starts_with("/assets/"))
      res.set_header("Cache-Control", "public, max-age=31536000, immutable");
    res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
  });
}

}  // namespace tessera::studio
