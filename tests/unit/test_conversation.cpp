// Conversation records → Qwen chat-template tokens and labels (data/conversation.hpp):
//   * golden: ids, labels and grids equal transformers' Qwen3VLProcessor on the template text for 7 records
//     (single image, system prompt + multi-turn text with NFD input and a reply starting with "\n\n", two images,
//     the "messages" spelling with media but no placeholders, a video, image + video, caption mode);
//     fixtures tests/fixtures/chat/ from tools/golden/make_chat_fixture.py;
//   * labels by hand on a synthetic conversation (what is and is not supervised in each mode);
//   * media resolution rules; malformed records: each is an error naming the sample key;
//   * a tokenizer without the chat tokens; concurrent builds give identical samples.
// Run: ./build/cpu/tests/test_conversation
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "vlpar/data/conversation.hpp"
#include "vlpar/data/image_encode.hpp"

namespace vlpar::data {
namespace {

const std::string kChatDir = std::string(VLPAR_FIXTURES_DIR) + "/chat";
const std::string kTokenizer = std::string(VLPAR_FIXTURES_DIR) + "/tokenizer/tokenizer.json";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> bytes_of(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::shared_ptr<const Tokenizer> tiny_tokenizer() {
  static const std::shared_ptr<const Tokenizer> tok = [] {
    auto t = Tokenizer::from_file(kTokenizer);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return std::make_shared<const Tokenizer>(std::move(t).value());
  }();
  return tok;
}

ConversationOptions test_options(LabelMode mode = LabelMode::kAssistant) {
  ConversationOptions o;
  o.label_mode = mode;
  o.image.min_pixels = 1024;  // as tools/golden/make_chat_fixture.py
  o.image.max_pixels = 1 << 24;
  return o;
}

ConversationBuilder make_builder(LabelMode mode = LabelMode::kAssistant) {
  auto b = ConversationBuilder::create(tiny_tokenizer(), test_options(mode));
  EXPECT_TRUE(b.ok()) << b.status().message();
  return std::move(b).value();
}

std::vector<int32_t> parse_csv(const std::string& s) {
  std::vector<int32_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) v.push_back(std::stoi(item));
  return v;
}

std::vector<VisionGrid> parse_grids(const std::string& s) {
  std::vector<VisionGrid> g;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ';')) {
    const std::vector<int32_t> v = parse_csv(item);
    if (v.size() == 3) g.push_back(VisionGrid{v[0], v[1], v[2]});
  }
  return g;
}

struct GoldenCase {
  std::string name;
  LabelMode mode = LabelMode::kAssistant;
  Sample sample;
  std::vector<int32_t> ids, labels;
  std::vector<VisionGrid> image_grids, video_grids;
};

std::vector<GoldenCase> load_cases() {
  std::ifstream f(kChatDir + "/cases.txt");
  EXPECT_TRUE(f.good()) << "missing " << kChatDir << "/cases.txt";
  std::vector<GoldenCase> cases;
  std::string line;
  GoldenCase c;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find(' ');
    const std::string tag = line.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (tag == "case") {
      c = GoldenCase{};
      const size_t s2 = rest.find(' ');
      c.name = rest.substr(0, s2);
      c.mode = rest.substr(s2 + 1) == "text" ? LabelMode::kAllText : LabelMode::kAssistant;
      c.sample.key = c.name;
    } else if (tag == "record") {
      c.sample.fields.push_back({"json", bytes_of(rest)});
    } else if (tag == "field") {
      const size_t s2 = rest.find(' ');
      c.sample.fields.push_back({rest.substr(0, s2), read_bytes(kChatDir + "/" + rest.substr(s2 + 1))});
    } else if (tag == "ids") {
      c.ids = parse_csv(rest);
    } else if (tag == "labels") {
      c.labels = parse_csv(rest);
    } else if (tag == "image_grids") {
      c.image_grids = parse_grids(rest);
    } else if (tag == "video_grids") {
      c.video_grids = parse_grids(rest);
    } else if (tag == "end") {
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

void expect_grids(const std::vector<VisionGrid>& got, const std::vector<VisionGrid>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].t, want[i].t) << what << " grid " << i;
    EXPECT_EQ(got[i].h, want[i].h) << what << " grid " << i;
    EXPECT_EQ(got[i].w, want[i].w) << what << " grid " << i;
  }
}

TEST(Conversation, GoldenIdsAndLabelsMatchHfProcessor) {
  const std::vector<GoldenCase> cases = load_cases();
  ASSERT_EQ(cases.size(), 7u);
  const ConversationBuilder sft = make_builder(LabelMode::kAssistant);
  const ConversationBuilder text = make_builder(LabelMode::kAllText);
  int64_t supervised_total = 0, ignored_total = 0;
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ConversationBuilder& b = c.mode == LabelMode::kAllText ? text : sft;
    auto r = b.build(c.sample);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const TokenizedSample& s = r.value();
    EXPECT_EQ(s.key, c.name);
    ASSERT_EQ(s.input_ids.size(), c.ids.size());
    for (size_t i = 0; i < c.ids.size(); ++i) EXPECT_EQ(s.input_ids[i], c.ids[i]) << "token " << i;
    ASSERT_EQ(s.labels.size(), c.labels.size());
    for (size_t i = 0; i < c.labels.size(); ++i) EXPECT_EQ(s.labels[i], c.labels[i]) << "label " << i;
    expect_grids(s.image_grids, c.image_grids, "image");
    expect_grids(s.video_grids, c.video_grids, "video");
    const int64_t patch_dim = 3 * 2 * 16 * 16;
    if (!c.image_grids.empty() || !c.video_grids.empty()) {
      EXPECT_EQ(s.patch_dim, patch_dim);
    }
    EXPECT_EQ(static_cast<int64_t>(s.pixel_values.size()), s.image_patches() * patch_dim);
    EXPECT_EQ(static_cast<int64_t>(s.pixel_values_videos.size()), s.video_patches() * patch_dim);
    supervised_total += s.num_label_tokens();
    ignored_total += s.num_tokens() - s.num_label_tokens();
  }
  EXPECT_GT(supervised_total, 0);  // the fixtures exercise both label values
  EXPECT_GT(ignored_total, 0);
}

// A processed image stand-in: only the grid, token count and patch_dim matter for tokenize().
ProcessedImage fake_image(int64_t h, int64_t w) {
  ProcessedImage im;
  im.grid = VisionGrid{1, h, w};
  im.num_tokens = h * w / 4;
  im.patch_dim = 4;
  im.pixel_values.assign(static_cast<size_t>(h * w * 4), 0.5f);
  return im;
}

TEST(Conversation, LabelsByHand) {
  const ConversationBuilder sft = make_builder(LabelMode::kAssistant);
  const ConversationBuilder text = make_builder(LabelMode::kAllText);
  const ChatTokenIds& t = sft.token_ids();
  Conversation c;
  c.turns = {{ChatRole::kSystem, "Sys."}, {ChatRole::kUser, "Look <image> here"}, {ChatRole::kAssistant, "Ok"}};
  const std::vector<ProcessedImage> images = {fake_image(2, 4)};  // 2 pads
  auto r = sft.tokenize(c, images, {}, "hand");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const TokenizedSample& s = r.value();
  // Expected stream, piece by piece (text runs encoded with the same tokenizer).
  const Tokenizer& tok = *tiny_tokenizer();
  std::vector<int32_t> want;
  std::vector<int32_t> want_labels;
  auto add_text = [&](const std::string& txt, bool sup) {
    auto ids = tok.encode(txt).value();
    for (int32_t id : ids) {
      want.push_back(id);
      want_labels.push_back(sup ? id : kIgnoreLabel);
    }
  };
  auto add_tok = [&](int32_t id, bool sup) {
    want.push_back(id);
    want_labels.push_back(sup ? id : kIgnoreLabel);
  };
  add_tok(t.im_start, false);
  add_text("system\nSys.", false);
  add_tok(t.im_end, false);
  add_text("\n", false);
  add_tok(t.im_start, false);
  add_text("user\nLook ", false);
  add_tok(t.vision_start, false);
  add_tok(t.image_pad, false);
  add_tok(t.image_pad, false);
  add_tok(t.vision_end, false);
  add_text(" here", false);
  add_tok(t.im_end, false);
  add_text("\n", false);
  add_tok(t.im_start, false);
  add_text("assistant\n", false);  // "assistant\nOk" splits as assistant | \n | Ok with the Qwen regex
  add_text("Ok", true);
  add_tok(t.im_end, true);
  add_text("\n", false);
  EXPECT_EQ(s.input_ids, want);
  EXPECT_EQ(s.labels, want_labels);
  EXPECT_EQ(s.num_label_tokens(), static_cast<int64_t>(tok.encode("Ok").value().size()) + 1);
  EXPECT_EQ(s.pixel_values.size(), 2u * 4u * 4u);

  // Caption mode: every token except the vision span.
  auto r2 = text.tokenize(c, images, {}, "hand");
  ASSERT_TRUE(r2.ok()) << r2.status().message();
  for (size_t i = 0; i < r2->input_ids.size(); ++i) {
    const int32_t id = r2->input_ids[i];
    const bool vision = id == t.vision_start || id == t.vision_end || id == t.image_pad;
    EXPECT_EQ(r2->labels[i], vision ? kIgnoreLabel : id) << "token " << i;
  }
  EXPECT_EQ(r2->input_ids, s.input_ids);
}

TEST(Conversation, ParsesBothSpellingsAndMediaNames) {
  auto a = parse_conversation(R"({"conversations":[{"from":"human","value":"<image>hi"},{"from":"gpt","value":"yo"}],
                                  "image":"a.jpg"})", "k1");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->turns.size(), 2u);
  EXPECT_EQ(a->turns[0].role, ChatRole::kUser);
  EXPECT_EQ(a->turns[1].role, ChatRole::kAssistant);
  EXPECT_EQ(a->images, std::vector<std::string>{"a.jpg"});
  auto b = parse_conversation(R"({"messages":[{"role":"system","content":"s"},
      {"role":"user","content":[{"type":"image"},{"type":"text","text":"what?"},{"type":"video"}]},
      {"role":"assistant","content":"x"}], "videos":[["f0.jpg","f1.jpg"],{"frames":["g0.jpg"],"fps":4}], "fps":2})",
                              "k2");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->turns[1].content, "<image>what?<video>");
  ASSERT_EQ(b->videos.size(), 2u);
  EXPECT_EQ(b->videos[0].frames.size(), 2u);
  EXPECT_EQ(b->videos[0].fps, 0.0);
  EXPECT_EQ(b->videos[1].fps, 4.0);
  EXPECT_EQ(b->record_fps, 2.0);
}

Sample json_sample(const std::string& key, const std::string& json) {
  Sample s;
  s.key = key;
  s.fields.push_back({"json", bytes_of(json)});
  return s;
}

std::vector<uint8_t> tiny_png(int w, int h, uint8_t v) {
  Image im = Image::zeros(w, h);
  for (auto& b : im.rgb) b = v;
  return encode_png(im).value();
}

void expect_error_naming_key(const Result<TokenizedSample>& r, const std::string& key, const std::string& part) {
  ASSERT_FALSE(r.ok()) << "expected an error for " << key;
  EXPECT_NE(r.status().message().find("sample '" + key + "'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
}

TEST(Conversation, MalformedRecordsAreErrorsNamingTheKey) {
  const ConversationBuilder b = make_builder();
  const std::string ok_turns = R"([{"from":"human","value":"<image>q"},{"from":"gpt","value":"a"}])";
  expect_error_naming_key(b.build(json_sample("m1", R"({"id":"x"})")), "m1", "neither");
  expect_error_naming_key(b.build(json_sample("m2", R"({"conversations":[{"from":"bot","value":"x"}]})")), "m2",
                          "unknown role 'bot'");
  expect_error_naming_key(b.build(json_sample("m3", "{not json")), "m3", "not valid JSON");
  expect_error_naming_key(b.build(json_sample("m4", R"({"conversations":[]})")), "m4", "non-empty");
  expect_error_naming_key(b.build(json_sample("m5", R"({"conversations":[{"from":"human"}]})")), "m5",
                          "has no \"value\"");
  // More placeholders than images (no image at all).
  expect_error_naming_key(b.build(json_sample("m6", R"({"conversations":)" + ok_turns + "}")), "m6",
                          "placeholders but only 0 images");
  // Two images, one placeholder.
  {
    Sample s = json_sample("m7", R"({"conversations":)" + ok_turns + "}");
    s.fields.push_back({"0.png", tiny_png(40, 40, 10)});
    s.fields.push_back({"1.png", tiny_png(40, 40, 20)});
    expect_error_naming_key(b.build(s), "m7", "left unused");
  }
  // An image that fails to decode.
  {
    Sample s = json_sample("m8", R"({"conversations":)" + ok_turns + "}");
    std::vector<uint8_t> bad = tiny_png(40, 40, 10);
    bad.resize(bad.size() / 2);
    s.fields.push_back({"png", bad});
    expect_error_naming_key(b.build(s), "m8", "image 0 (field 'png')");
  }
  {
    Sample s = json_sample("m9", R"({"conversations":)" + ok_turns + "}");
    s.fields.push_back({"jpg", bytes_of("GIF89a not an image")});
    expect_error_naming_key(b.build(s), "m9", "image 0");
  }
  // No record field.
  {
    Sample s;
    s.key = "m10";
    s.fields.push_back({"txt", bytes_of("caption")});
    expect_error_naming_key(b.build(s), "m10", "no 'json' field");
  }
  {
    Sample s = json_sample("m11", R"({"conversations":[{"from":"system","value":"<image>"},{"from":"human","value":"q"},
                                    {"from":"gpt","value":"a"}],"image":"a.png"})");
    s.fields.push_back({"a.png", tiny_png(40, 40, 10)});
    expect_error_naming_key(b.build(s), "m11", "system turn");
  }
  expect_error_naming_key(b.build(json_sample("m12", R"({"conversations":[{"from":"human","value":"q"}]})")), "m12",
                          "no assistant turn");
  expect_error_naming_key(
      b.build(json_sample("m13", R"({"conversations":[{"from":"human","value":"<video>q"},{"from":"gpt","value":"a"}],
                                    "video":"clip.mp4"})")),
      "m13", "video files are not supported");
  expect_error_naming_key(b.build(json_sample("m14", R"({"conversations":)" + ok_turns + R"(,"image":"nope.jpg"})")),
                          "m14", "image 0 ('nope.jpg') has no field");
  {
    Sample s = json_sample("m15", R"({"conversations":)" + ok_turns + "}");
    s.fields.push_back({"0.png", tiny_png(40, 40, 10)});
    s.fields.push_back({"2.png", tiny_png(40, 40, 20)});
    expect_error_naming_key(b.build(s), "m15", "without gaps");
  }
  // Invalid UTF-8 inside a JSON string.
  expect_error_naming_key(b.build(json_sample("m16", "{\"conversations\":[{\"from\":\"human\",\"value\":\"\xff\"}]}")),
                          "m16", "not valid JSON");
}

TEST(Conversation, ResolvesSingleAndNumberedImages) {
  const ConversationBuilder b = make_builder();
  Sample one = json_sample("r1", R"({"conversations":[{"from":"human","value":"q"},{"from":"gpt","value":"a"}]})");
  one.fields.push_back({"png", tiny_png(64, 32, 50)});
  auto r1 = b.build(one);
  ASSERT_TRUE(r1.ok()) << r1.status().message();
  ASSERT_EQ(r1->num_images(), 1);  // prepended to the user turn
  EXPECT_EQ(r1->input_ids[3], b.token_ids().vision_start);
  Sample many = json_sample("r2", R"({"conversations":[{"from":"human","value":"<image><image><image>"},
                                                        {"from":"gpt","value":"a"}]})");
  // Numbered by value, not by field order ("10" would sort before "2" as text).
  many.fields.push_back({"2.png", tiny_png(32, 96, 3)});
  many.fields.push_back({"0.png", tiny_png(64, 32, 1)});
  many.fields.push_back({"1.png", tiny_png(32, 32, 2)});
  auto r2 = b.build(many);
  ASSERT_TRUE(r2.ok()) << r2.status().message();
  ASSERT_EQ(r2->num_images(), 3);
  EXPECT_EQ(r2->image_grids[0].w, 4);  // 64 wide
  EXPECT_EQ(r2->image_grids[1].w, 2);  // 32
  EXPECT_EQ(r2->image_grids[2].h, 6);  // 96 high
  // Pixel rows follow the image order: the first image's patches hold its value (1 → (1 − 127.5)/127.5).
  EXPECT_FLOAT_EQ(r2->pixel_values[0], (1.0f - 127.5f) / 127.5f);
  EXPECT_FLOAT_EQ(r2->pixel_values[static_cast<size_t>(8 * 1536)], (2.0f - 127.5f) / 127.5f);
}

TEST(Conversation, TokenizerWithoutChatTokensIsAnError) {
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
      "added_tokens": [{"id": 2, "content": "<|im_start|>", "single_word": false, "lstrip": false, "rstrip": false,
                        "normalized": false, "special": true}],
      "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
      "use_regex": true}, "decoder": {"type": "ByteLevel"}})";
  auto tok = Tokenizer::from_json(json);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto ids = ChatTokenIds::from_tokenizer(tok.value());
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("<|im_end|>, <|vision_start|>, <|vision_end|>, <|image_pad|>, <|video_pad|>"),
            std::string::npos)
      << ids.status().message();
  EXPECT_EQ(ids.status().message().find("<|im_start|>,"), std::string::npos) << ids.status().message();
  auto b = ConversationBuilder::create(std::make_shared<const Tokenizer>(std::move(tok).value()), test_options());
  EXPECT_FALSE(b.ok());
}

TEST(Conversation, ConcurrentBuildsAreIdentical) {
  const ConversationBuilder b = make_builder();
  const std::vector<GoldenCase> cases = load_cases();
  std::vector<TokenizedSample> serial;
  for (const GoldenCase& c : cases) {
    if (c.mode != LabelMode::kAssistant) continue;
    serial.push_back(b.build(c.sample).value());
  }
  std::vector<std::vector<TokenizedSample>> par(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep)
        for (const GoldenCase& c : cases)
          if (c.mode == LabelMode::kAssistant) {
            TokenizedSample s = b.build(c.sample).value();
            if (rep == 4) par[static_cast<size_t>(t)].push_back(std::move(s));
          }
    });
  for (auto& th : threads) th.join();
  for (const auto& p : par) {
    ASSERT_EQ(p.size(), serial.size());
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_EQ(p[i].input_ids, serial[i].input_ids);
      EXPECT_EQ(p[i].labels, serial[i].labels);
      EXPECT_EQ(p[i].pixel_values, serial[i].pixel_values);
      EXPECT_EQ(p[i].pixel_values_videos, serial[i].pixel_values_videos);
    }
  }
}

}  // namespace
}  // namespace vlpar::data
