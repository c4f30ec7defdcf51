// Text forms shared by the report's renderings (text, HTML, JSON).
#pragma once

#include <string>

namespace tarmac::report {

// "2025-01-06 09:00" (UTC) for milliseconds since the epoch.
[[nodiscard]] std::string format_utc(long long ms);
// "2025-01-06T09:00:00Z".
[[nodiscard]] std::string format_iso(long long ms);
// "Mon 01-06" (UTC): a heat-map row label.
[[nodiscard]] std::string format_day(long long ms);
// "12.3 h"; "0 h" for zero.
// "12.3 h"; under an hour "42 min", under a minute "40 s"; "0 h" for none.
[[nodiscard]] std::string format_hours(double hours);
// "$1,234.56".
[[nodiscard]] std::string format_money(double usd);
// "12.5 %" of whole, "-" when whole is 0.
[[nodiscard]] std::string format_share(double part, double whole);
// The text in bold on a terminal that takes colour.
[[nodiscard]] std::string bold(const std::string& text, bool color);

}  // namespace tarmac::report
