// Plain-text tables with aligned columns and optional colour, for every human-readable command.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace tarmac::cli {

enum class Align { Left, Right };
enum class Style { Plain, Good, Warn, Bad, Dim, Bold };

struct Column {
  std::string title;
  Align align = Align::Left;
};

struct Cell {
  std::string text;
  Style style = Style::Plain;
};

// `text` wrapped in the ANSI colour of `style` when `color` is on.
[[nodiscard]] std::string styled(const std::string& text, Style style, bool color);

class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  // Cells are shown through util::terminal_text: a process's command line, a job's name or a
  // user name cannot move the cursor, retitle or clear the terminal of whoever reads the table.
  void add_row(std::vector<Cell> cells);
  // Prints the header and rows, columns separated by two spaces; no trailing spaces.
  void print(std::FILE* out, bool color) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<Cell>> rows_;
};

}  // namespace tarmac::cli
