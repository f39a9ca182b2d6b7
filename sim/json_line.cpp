#include "json_line.hpp"

#include <fmt/format.h>

#include <cctype>

namespace kvpool::sim {

namespace {

class Parser {
public:
    explicit Parser(const std::string& text) : s_(text) {}

    std::map<std::string, JsonMember> object() {
        std::map<std::string, JsonMember> members;
        skip_space();
        expect('{');
        skip_space();
        if (peek() == '}') {
            ++pos_;
        } else {
            while (true) {
                skip_space();
                const std::string key = string();
                skip_space();
                expect(':');
                skip_space();
                const std::size_t begin = pos_;
                const bool number =
                    peek() == '-' || std::isdigit(static_cast<unsigned char>(peek()));
                const bool is_string = peek() == '"';
                const std::string characters = is_string ? string() : std::string();
                if (!is_string)
                    value();
                if (members.count(key))
                    fail(fmt::format("member \"{}\" given twice", key), begin);
                members[key] =
                    JsonMember{number, is_string, s_.substr(begin, pos_ - begin), characters};
                skip_space();
                if (peek() == ',') {
                    ++pos_;
                    continue;
                }
                expect('}');
                break;
            }
        }
        skip_space();
        if (pos_ != s_.size())
            fail("text after the object", pos_);
        return members;
    }

private:
    [[noreturn]] void fail(const std::string& what, std::size_t at) const {
        throw JsonSyntaxError(fmt::format("column {}: {}", at + 1, what));
    }
    char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
    void skip_space() {
        while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_])))
            ++pos_;
    }
    void expect(char c) {
        if (peek() != c)
            fail(pos_ < s_.size() ? fmt::format("expected '{}', found '{}'", c, peek())
                                  : fmt::format("expected '{}', found the end of the line", c),
                 pos_);
        ++pos_;
    }

    std::string string() {
        expect('"');
        std::string out;
        while (peek() != '"') {
            if (pos_ >= s_.size())
                fail("unterminated string", pos_);
            if (s_[pos_] == '\\') {
                ++pos_;
                if (pos_ >= s_.size())
                    fail("unterminated string", pos_);
            }
            out += s_[pos_++];
        }
        ++pos_;
        return out;
    }

    void number() {
        const std::size_t begin = pos_;
        if (peek() == '-')
            ++pos_;
        const auto digits = [&] {
            const std::size_t from = pos_;
            while (std::isdigit(static_cast<unsigned char>(peek())))
                ++pos_;
            if (pos_ == from)
                fail("malformed number", begin);
        };
        digits();
        if (peek() == '.') {
            ++pos_;
            digits();
        }
        if (peek() == 'e' || peek() == 'E') {
            ++pos_;
            if (peek() == '+' || peek() == '-')
                ++pos_;
            digits();
        }
    }

    void literal(const char* word) {
        const std::string w(word);
        if (s_.compare(pos_, w.size(), w) != 0)
            fail("expected a JSON value", pos_);
        pos_ += w.size();
    }

    void value() {
        const char c = peek();
        if (c == '"') {
            string();
        } else if (c == '{' || c == '[') {
            const char close = c == '{' ? '}' : ']';
            ++pos_;
            skip_space();
            if (peek() == close) {
                ++pos_;
                return;
            }
            while (true) {
                skip_space();
                if (close == '}') {
                    string();
                    skip_space();
                    expect(':');
                    skip_space();
                }
                value();
                skip_space();
                if (peek() == ',') {
                    ++pos_;
                    continue;
                }
                expect(close);
                return;
            }
        } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
            number();
        } else if (c == 't') {
            literal("true");
        } else if (c == 'f') {
            literal("false");
        } else if (c == 'n') {
            literal("null");
        } else {
            fail("expected a JSON value", pos_);
        }
    }

    const std::string& s_;
    std::size_t pos_ = 0;
};

} // namespace

std::map<std::string, JsonMember> parse_json_object(const std::string& line) {
    return Parser(line).object();
}

} // namespace kvpool::sim
