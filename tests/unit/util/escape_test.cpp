#include "tarmac/util/escape.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tarmac::util {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(ValidUtf8, KeepsWellFormedText) {
  EXPECT_EQ(valid_utf8("python train.py --lr 0.1"), "python train.py --lr 0.1");
  EXPECT_EQ(valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x9A\x80"), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x9A\x80");
}

TEST(ValidUtf8, ReplacesEachInvalidByte) {
  EXPECT_EQ(valid_utf8("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_EQ(valid_utf8("\x80"), kFffd);                         // a stray continuation byte
  EXPECT_EQ(valid_utf8("x\xC3"), "x" + kFffd);                   // cut in the middle of a character
  EXPECT_EQ(valid_utf8("\xC0\xAF"), kFffd + kFffd);              // overlong '/'
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // past U+10FFFF
}

TEST(PrometheusLabel, EscapesQuoteBackslashNewline) {
  EXPECT_EQ(prometheus_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(PrometheusLabel, IsValidUtf8) { EXPECT_EQ(prometheus_label_value("run\xFF\xFE"), "run" + kFffd + kFffd); }

TEST(PrometheusLabel, CutsAtACharacterBoundary) {
  // 6 bytes of "é" (2 bytes each): a cut at 5 bytes would split the third one.
  const std::string text = "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9";
  EXPECT_EQ(prometheus_label_value(text, 8), text);
  EXPECT_EQ(prometheus_label_value(text, 7), "\xC3\xA9\xC3\xA9...");
  EXPECT_EQ(prometheus_label_value(text, 6), "\xC3\xA9...");
  EXPECT_EQ(prometheus_label_value("abcdef", 5), "ab...");
  // The cut comes before escaping: an escape is never split either.
  EXPECT_EQ(prometheus_label_value("ab\"\"\"\"", 5), "ab...");
}

TEST(TerminalText, EscapesControlCharacters) {
  EXPECT_EQ(terminal_text("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
  EXPECT_EQ(terminal_text("a\tb\rc\nd\x7f"), "a\\x09b\\x0dc\\x0ad\\x7f");
  EXPECT_EQ(terminal_text("\x1b[2J\x1b[H"), "\\x1b[2J\\x1b[H");
}

TEST(TerminalText, EscapesC1InvalidBytesAndBidiOverrides) {
  EXPECT_EQ(terminal_text("\xC2\x9b" "31m"), "\\u009b31m");  // CSI as a character
  EXPECT_EQ(terminal_text("\x9b" "31m"), "\\x9b31m");        // CSI as a raw byte (not UTF-8)
  EXPECT_EQ(terminal_text("evil\xE2\x80\xAEgnp.exe"), "evil\\u202egnp.exe");
}

TEST(TerminalText, KeepsPrintableText) {
  EXPECT_EQ(terminal_text("python3 /home/ana/train.py --name caf\xC3\xA9"), "python3 /home/ana/train.py --name caf\xC3\xA9");
}

TEST(TerminalLines, KeepsLineBreaksAndEscapesEachLine) {
  EXPECT_EQ(terminal_lines("no 1 free GPU\n  GPU 0: leased: by \x1b]0;x\x07\n"),
            "no 1 free GPU\n  GPU 0: leased: by \\x1b]0;x\\x07\n");
  EXPECT_EQ(terminal_lines("a\rb\n\nc"), "a\\x0db\n\nc");
  EXPECT_EQ(terminal_lines(""), "");
}

TEST(HtmlText, EscapesMarkup) {
  EXPECT_EQ(html_text("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;");
  EXPECT_EQ(html_text("a\xFF"), "a" + kFffd);
}

TEST(SlackText, EscapesWhatSlackDocuments) {
  EXPECT_EQ(slack_text("<!channel> see <http://evil.example|docs> & more"),
            "&lt;!channel&gt; see &lt;http://evil.example|docs&gt; &amp; more");
}

TEST(JsonText, ReplacesInvalidBytesInsteadOfThrowing) {
  const nlohmann::json j = {{"command", "train\xFF\x1b"}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
  const std::string text = json_text(j);
  EXPECT_EQ(nlohmann::json::parse(text)["command"], "train" + kFffd + "\x1b");
  EXPECT_EQ(json_text(j, 2), "{\n  \"command\": \"train" + kFffd + "\\u001b\"\n}");
}

}  // namespace
}  // namespace tarmac::util
