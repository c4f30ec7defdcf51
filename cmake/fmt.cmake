# fmt compiled once. Debian's fmt is used header-only so that tarmac needs nothing but glibc at run
# time (PRODUCT.md §2), but FMT_HEADER_ONLY compiles fmt's whole implementation again in every file
# that includes <fmt/format.h>: about 7 of the 9 CPU seconds of a small file at -O2 -g (docs/ci.md).
# tarmac_fmt is that implementation (fmt's own format-inl.h) compiled once into a static library:
# the same code, linked statically as before, compiled once per build instead of ~170 times.
# Targets link tarmac_fmt instead of fmt::fmt-header-only.
get_target_property(_tarmac_fmt_includes fmt::fmt-header-only INTERFACE_INCLUDE_DIRECTORIES)
file(WRITE ${CMAKE_BINARY_DIR}/tarmac_fmt.cpp [=[
// fmt's implementation for the whole build (cmake/fmt.cmake): the definitions format-inl.h holds,
// and the templates format.h and core.h declare but leave to the library to instantiate.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
}  // namespace detail
FMT_END_NAMESPACE
]=])
add_library(tarmac_fmt STATIC ${CMAKE_BINARY_DIR}/tarmac_fmt.cpp)
target_include_directories(tarmac_fmt SYSTEM PUBLIC ${_tarmac_fmt_includes})
