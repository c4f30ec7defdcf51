#include "tarmac/cli/table.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "tarmac/util/escape.hpp"

namespace tarmac::cli {

namespace {

// Display width in terminal cells: UTF-8 continuation bytes take no cell.
std::size_t width(const std::string& text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0U) != 0x80U; }));
}

const char* ansi(Style style) {
  switch (style) {
    case Style::Good: return "\033[32m";
    case Style::Warn: return "\033[33m";
    case Style::Bad: return "\033[1;31m";
    case Style::Dim: return "\033[2m";
    case Style::Bold: return "\033[1m";
    case Style::Plain: return "";
  }
  return "";
}

}  // namespace

std::string styled(const std::string& text, Style style, bool color) {
  if (!color || style == Style::Plain) return text;
  return std::string(ansi(style)) + text + "\033[0m";
}

void Table::add_row(std::vector<Cell> cells) {
  for (auto& cell : cells) cell.text = util::terminal_text(cell.text);
  rows_.push_back(std::move(cells));
}

void Table::print(std::FILE* out, bool color) const {
  std::vector<std::size_t> widths(columns_.size(), 0);
  for (std::size_t c = 0; c < columns_.size(); ++c) widths[c] = width(columns_[c].title);
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size() && c < widths.size(); ++c) widths[c] = std::max(widths[c], width(row[c].text));
  }
  auto emit = [&](const std::vector<Cell>& cells) {
    std::string line;
    std::string pending;  // spaces held back so that a line never ends in padding
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const Cell cell = c < cells.size() ? cells[c] : Cell{};
      const std::size_t pad = widths[c] - std::min(widths[c], width(cell.text));
      if (c > 0) pending += "  ";
      if (columns_[c].align == Align::Right) pending += std::string(pad, ' ');
      if (!cell.text.empty()) {
        line += pending + styled(cell.text, cell.style, color);
        pending.clear();
      }
      if (columns_[c].align == Align::Left) pending += std::string(pad, ' ');
    }
    fmt::print(out, "{}\n", line);
  };
  std::vector<Cell> header;
  for (const auto& col : columns_) header.push_back({col.title, Style::Bold});
  emit(header);
  for (const auto& row : rows_) emit(row);
}

}  // namespace tarmac::cli
