// Conversation records → Qwen chat-template tokens, vision expansion and labels. See
// include/vlpar/data/conversation.hpp. Test: tests/unit/test_conversation.cpp.
#include "vlpar/data/conversation.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <optional>

namespace vlpar::data {
namespace {

using nlohmann::json;

constexpr std::string_view kImagePlaceholder = "<image>";
constexpr std::string_view kVideoPlaceholder = "<video>";

bool is_image_ext(std::string_view ext) { return ext == "jpg" || ext == "jpeg" || ext == "png"; }

std::string_view basename(std::string_view path) {
  const size_t s = path.rfind('/');
  return s == std::string_view::npos ? path : path.substr(s + 1);
}

Result<ChatRole> parse_role(std::string_view role, std::string_view key, size_t turn) {
  if (role == "system") return ChatRole::kSystem;
  if (role == "human" || role == "user") return ChatRole::kUser;
  if (role == "gpt" || role == "assistant") return ChatRole::kAssistant;
  return VLPAR_STATUS(StatusCode::kInvalidArgument,
                      "sample '{}': turn {} has unknown role '{}' (expected system, human/user or gpt/assistant)", key,
                      turn, role);
}

// The text of an OpenAI-style content list: text items joined, media items as placeholders.
Result<std::string> content_list_text(const json& items, std::string_view key, size_t turn) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) {
    const json& it = items[i];
    VLPAR_CHECK(it.is_object() && it.contains("type") && it["type"].is_string(),
                "sample '{}': turn {} content item {} is not an object with a string \"type\"", key, turn, i);
    const std::string type = it["type"].get<std::string>();
    if (type == "text") {
      VLPAR_CHECK(it.contains("text") && it["text"].is_string(),
                  "sample '{}': turn {} content item {} of type text has no string \"text\"", key, turn, i);
      text += it["text"].get<std::string>();
    } else if (type == "image" || type == "image_url") {
      text += kImagePlaceholder;
    } else if (type == "video") {
      text += kVideoPlaceholder;
    } else {
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "sample '{}': turn {} content item {} has unknown type '{}'",
                          key, turn, i, type);
    }
  }
  return text;
}

Result<std::vector<std::string>> string_list(const json& v, std::string_view what, std::string_view key) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      VLPAR_CHECK(v[i].is_string(), "sample '{}': {}[{}] is not a string", key, what, i);
      out.push_back(v[i].get<std::string>());
    }
  } else if (!v.is_null()) {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "sample '{}': {} is neither a string nor a list of strings", key,
                        what);
  }
  return out;
}

Result<VideoRef> parse_video(const json& v, std::string_view what, std::string_view key) {
  VideoRef ref;
  if (v.is_string())
    return VLPAR_STATUS(StatusCode::kNotSupported,
                        "sample '{}': {} '{}' is a single file; video files are not supported, give the video's "
                        "frames (a list of image names)",
                        key, what, v.get<std::string>());
  if (v.is_object()) {
    VLPAR_CHECK(v.contains("frames"), "sample '{}': {} has no \"frames\"", key, what);
    VLPAR_ASSIGN_OR_RETURN(ref.frames, string_list(v["frames"], std::string(what) + ".frames", key));
    if (v.contains("fps")) {
      VLPAR_CHECK(v["fps"].is_number() && v["fps"].get<double>() > 0, "sample '{}': {}.fps is not a positive number",
                  key, what);
      ref.fps = v["fps"].get<double>();
    }
  } else {
    VLPAR_ASSIGN_OR_RETURN(ref.frames, string_list(v, what, key));
  }
  VLPAR_CHECK(!ref.frames.empty(), "sample '{}': {} has no frames", key, what);
  return ref;
}

// Counts of placeholders over all turns.
struct PlaceholderCounts {
  int64_t images = 0;
  int64_t videos = 0;
};

int64_t count_occurrences(std::string_view text, std::string_view needle) {
  int64_t n = 0;
  for (size_t p = text.find(needle); p != std::string_view::npos; p = text.find(needle, p + needle.size())) ++n;
  return n;
}

PlaceholderCounts count_placeholders(const Conversation& c) {
  PlaceholderCounts n;
  for (const ChatTurn& t : c.turns) {
    n.images += count_occurrences(t.content, kImagePlaceholder);
    n.videos += count_occurrences(t.content, kVideoPlaceholder);
  }
  return n;
}

// Checks placeholders against the media counts; returns whether the media go at the start of the first user turn.
struct Placement {
  bool prepend_images = false;
  bool prepend_videos = false;
};

Result<Placement> check_placeholders(const Conversation& c, int64_t n_images, int64_t n_videos, std::string_view key) {
  const PlaceholderCounts p = count_placeholders(c);
  Placement place;
  for (const ChatTurn& t : c.turns)
    if (t.role == ChatRole::kSystem)
      VLPAR_CHECK(t.content.find(kImagePlaceholder) == std::string::npos &&
                      t.content.find(kVideoPlaceholder) == std::string::npos,
                  "sample '{}': a system turn holds an <image>/<video> placeholder (the template puts media only in "
                  "user and assistant turns)",
                  key);
  const auto check = [&](int64_t placeholders, int64_t media, const char* what, bool& prepend) -> Status {
    if (placeholders == 0 && media > 0) {
      prepend = true;
      return Status::Ok();
    }
    VLPAR_CHECK(placeholders <= media, "sample '{}': {} <{}> placeholders but only {} {}s", key, placeholders, what,
                media, what);
    VLPAR_CHECK(placeholders == media, "sample '{}': {} {}s but {} <{}> placeholders ({} left unused)", key, media,
                what, placeholders, what, media - placeholders);
    return Status::Ok();
  };
  VLPAR_RETURN_IF_ERROR(check(p.images, n_images, "image", place.prepend_images));
  VLPAR_RETURN_IF_ERROR(check(p.videos, n_videos, "video", place.prepend_videos));
  if (place.prepend_images || place.prepend_videos) {
    const bool has_user = std::any_of(c.turns.begin(), c.turns.end(),
                                      [](const ChatTurn& t) { return t.role == ChatRole::kUser; });
    VLPAR_CHECK(has_user, "sample '{}': media without placeholders need a user turn to go into, and there is none",
                key);
  }
  return place;
}

// ---- token stream assembly ----------------------------------------------------------------------------------

// A piece of text inside a run (text between two special tokens) with its label flag.
struct TextPart {
  std::string text;
  bool supervised = false;
};

class StreamBuilder {
 public:
  StreamBuilder(const Tokenizer& tok, std::string_view key, TokenizedSample& out)
      : tok_(tok), key_(key), out_(out) {}

  void text(std::string_view s, bool supervised) {
    if (s.empty()) return;
    if (!run_.empty() && run_.back().supervised == supervised) {
      run_.back().text += s;
    } else {
      run_.push_back({std::string(s), supervised});
    }
  }

  Status token(int32_t id, bool supervised, int64_t count = 1) {
    VLPAR_RETURN_IF_ERROR(flush());
    out_.input_ids.insert(out_.input_ids.end(), static_cast<size_t>(count), id);
    out_.labels.insert(out_.labels.end(), static_cast<size_t>(count), supervised ? id : kIgnoreLabel);
    return Status::Ok();
  }

  // Encodes the pending run as one string (what HF's tokenizer sees between two special tokens).
  Status flush() {
    if (run_.empty()) return Status::Ok();
    std::string all;
    bool mixed = false;
    for (const TextPart& p : run_) {
      all += p.text;
      mixed = mixed || p.supervised != run_.front().supervised;
    }
    ids_.clear();
    const Status st = tok_.encode_into(all, ids_);
    if (!st.ok())
      return VLPAR_STATUS(st.code(), "sample '{}': tokenizing the conversation text: {}", key_, st.message());
    const size_t first = out_.input_ids.size();
    out_.input_ids.insert(out_.input_ids.end(), ids_.begin(), ids_.end());
    out_.labels.resize(out_.input_ids.size(), kIgnoreLabel);
    if (!mixed) {
      if (run_.front().supervised)
        std::copy(ids_.begin(), ids_.end(), out_.labels.begin() + static_cast<std::ptrdiff_t>(first));
    } else {
      VLPAR_RETURN_IF_ERROR(label_mixed(first));
    }
    run_.clear();
    return Status::Ok();
  }

 private:
  // A run whose parts differ in label: token t is supervised when its bytes overlap a supervised part. Offsets are
  // in the normalised text; every part boundary follows "\n" or precedes "<" (starters that NFC never combines
  // across), so NFC(run) = Σ NFC(part) and the parts' normalised lengths give the boundaries.
  Status label_mixed(size_t first) {
    std::vector<std::pair<int64_t, int64_t>> supervised_ranges;
    int64_t offset = 0;
    for (const TextPart& p : run_) {
      VLPAR_ASSIGN_OR_RETURN(std::string norm, tok_.normalize(p.text));
      const int64_t len = static_cast<int64_t>(norm.size());
      if (p.supervised) supervised_ranges.emplace_back(offset, offset + len);
      offset += len;
    }
    int64_t pos = 0;
    for (size_t i = 0; i < ids_.size(); ++i) {
      const int32_t id = ids_[i];
      VLPAR_ASSIGN_OR_RETURN(std::string bytes, tok_.decode_bytes(std::span<const int32_t>(&id, 1)));
      const int64_t end = pos + static_cast<int64_t>(bytes.size());
      bool sup = false;
      for (const auto& [s, e] : supervised_ranges) sup = sup || (pos < e && s < end);
      if (sup) out_.labels[first + i] = id;
      pos = end;
    }
    VLPAR_CHECK_CODE(pos == offset, StatusCode::kInternal,
                     "sample '{}': token bytes ({}) do not add up to the normalised text ({} bytes)", key_, pos,
                     offset);
    return Status::Ok();
  }

  const Tokenizer& tok_;
  std::string_view key_;
  TokenizedSample& out_;
  std::vector<TextPart> run_;
  std::vector<int32_t> ids_;
};

int64_t sum_patches(std::span<const VisionGrid> grids) {
  int64_t n = 0;
  for (const VisionGrid& g : grids) n += g.patches();
  return n;
}

// The sample's image fields, per the resolution rule of the header.
Result<std::vector<const SampleField*>> resolve_images(const Sample& s, const Conversation& c) {
  std::vector<std::pair<int64_t, const SampleField*>> numbered;
  std::vector<const SampleField*> plain;
  for (const SampleField& f : s.fields) {
    const size_t dot = f.ext.find('.');
    if (dot == std::string::npos) {
      if (is_image_ext(f.ext)) plain.push_back(&f);
      continue;
    }
    const std::string_view num = std::string_view(f.ext).substr(0, dot);
    if (!is_image_ext(std::string_view(f.ext).substr(dot + 1)) || num.empty()) continue;
    int64_t n = 0;
    const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), n);
    if (ec != std::errc() || ptr != num.data() + num.size()) continue;
    numbered.emplace_back(n, &f);
  }
  std::stable_sort(numbered.begin(), numbered.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < numbered.size(); ++i)
    VLPAR_CHECK(numbered[i].first == static_cast<int64_t>(i),
                "sample '{}': numbered image fields must run 0..{} without gaps or repeats, found field '{}' at "
                "position {}",
                s.key, numbered.size() - 1, numbered[i].second->ext, i);
  VLPAR_CHECK(plain.size() <= 1, "sample '{}': {} unnumbered image fields ('{}', '{}'); which image is which?", s.key,
              plain.size(), plain.size() > 1 ? plain[0]->ext : "", plain.size() > 1 ? plain[1]->ext : "");

  std::vector<const SampleField*> out;
  if (c.images.empty()) {
    if (!numbered.empty()) {
      for (const auto& [n, f] : numbered) out.push_back(f);
    } else if (!plain.empty()) {
      out.push_back(plain[0]);
    }
    return out;
  }
  for (size_t i = 0; i < c.images.size(); ++i) {
    const std::string& name = c.images[i];
    const SampleField* f = s.field(name);
    if (f == nullptr) f = s.field(basename(name));
    if (f == nullptr && i < numbered.size() && numbered.size() == c.images.size()) f = numbered[i].second;
    if (f == nullptr && numbered.empty() && c.images.size() == 1 && !plain.empty()) f = plain[0];
    VLPAR_CHECK(f != nullptr, "sample '{}': image {} ('{}') has no field in the sample (fields: {})", s.key, i, name,
                [&] {
                  std::string l;
                  for (const SampleField& g : s.fields) l += (l.empty() ? "" : ", ") + g.ext;
                  return l;
                }());
    out.push_back(f);
  }
  return out;
}

Result<const SampleField*> resolve_frame(const Sample& s, const std::string& name, size_t video, size_t frame) {
  const SampleField* f = s.field(name);
  if (f == nullptr) f = s.field(basename(name));
  VLPAR_CHECK(f != nullptr, "sample '{}': video {} frame {} ('{}') has no field in the sample", s.key, video, frame,
              name);
  return f;
}

}  // namespace

const char* chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem: return "system";
    case ChatRole::kUser: return "user";
    case ChatRole::kAssistant: return "assistant";
  }
  return "?";
}

Result<Conversation> parse_conversation(std::string_view text, std::string_view key) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  VLPAR_CHECK(!doc.is_discarded(), "sample '{}': the record is not valid JSON (or not UTF-8)", key);
  VLPAR_CHECK(doc.is_object(), "sample '{}': the record is not a JSON object", key);
  Conversation c;
  const bool sharegpt = doc.contains("conversations");
  const char* list_name = sharegpt ? "conversations" : "messages";
  VLPAR_CHECK(sharegpt || doc.contains("messages"), "sample '{}': the record has neither \"conversations\" nor "
              "\"messages\"", key);
  const json& turns = doc[list_name];
  VLPAR_CHECK(turns.is_array() && !turns.empty(), "sample '{}': \"{}\" is not a non-empty list", key, list_name);
  const char* role_key = sharegpt ? "from" : "role";
  const char* text_key = sharegpt ? "value" : "content";
  for (size_t i = 0; i < turns.size(); ++i) {
    const json& t = turns[i];
    VLPAR_CHECK(t.is_object(), "sample '{}': {}[{}] is not an object", key, list_name, i);
    VLPAR_CHECK(t.contains(role_key) && t[role_key].is_string(), "sample '{}': {}[{}] has no string \"{}\"", key,
                list_name, i, role_key);
    ChatTurn turn;
    VLPAR_ASSIGN_OR_RETURN(turn.role, parse_role(t[role_key].get<std::string>(), key, i));
    VLPAR_CHECK(t.contains(text_key), "sample '{}': {}[{}] has no \"{}\"", key, list_name, i, text_key);
    const json& v = t[text_key];
    if (v.is_string()) {
      turn.content = v.get<std::string>();
    } else if (v.is_array() && !sharegpt) {
      VLPAR_ASSIGN_OR_RETURN(turn.content, content_list_text(v, key, i));
    } else {
      return VLPAR_STATUS(StatusCode::kInvalidArgument, "sample '{}': {}[{}].{} is not a string", key, list_name, i,
                          text_key);
    }
    c.turns.push_back(std::move(turn));
  }
  for (const char* k : {"image", "images"}) {
    if (!doc.contains(k)) continue;
    VLPAR_ASSIGN_OR_RETURN(std::vector<std::string> names, string_list(doc[k], k, key));
    c.images.insert(c.images.end(), names.begin(), names.end());
  }
  if (doc.contains("video")) {
    const json& v = doc["video"];
    const bool many = v.is_array() && !v.empty() && (v[0].is_array() || v[0].is_object());
    if (many) {
      for (size_t i = 0; i < v.size(); ++i) {
        VLPAR_ASSIGN_OR_RETURN(VideoRef r, parse_video(v[i], fmt::format("video[{}]", i), key));
        c.videos.push_back(std::move(r));
      }
    } else if (!v.is_null()) {
      VLPAR_ASSIGN_OR_RETURN(VideoRef r, parse_video(v, "video", key));
      c.videos.push_back(std::move(r));
    }
  }
  if (doc.contains("videos")) {
    const json& v = doc["videos"];
    VLPAR_CHECK(v.is_array(), "sample '{}': \"videos\" is not a list", key);
    for (size_t i = 0; i < v.size(); ++i) {
      VLPAR_ASSIGN_OR_RETURN(VideoRef r, parse_video(v[i], fmt::format("videos[{}]", i), key));
      c.videos.push_back(std::move(r));
    }
  }
  for (const char* k : {"fps", "video_fps"}) {
    if (!doc.contains(k)) continue;
    VLPAR_CHECK(doc[k].is_number() && doc[k].get<double>() > 0, "sample '{}': \"{}\" is not a positive number", key,
                k);
    c.record_fps = doc[k].get<double>();
  }
  return c;
}

Result<ChatTokenIds> ChatTokenIds::from_tokenizer(const Tokenizer& tokenizer) {
  ChatTokenIds ids;
  std::string missing;
  const auto get = [&](const char* tok, int32_t& dst) {
    const std::optional<int32_t> id = tokenizer.token_to_id(tok);
    if (id) {
      dst = *id;
    } else {
      missing += (missing.empty() ? "" : ", ") + std::string(tok);
    }
  };
  get("<|im_start|>", ids.im_start);
  get("<|im_end|>", ids.im_end);
  get("<|vision_start|>", ids.vision_start);
  get("<|vision_end|>", ids.vision_end);
  get("<|image_pad|>", ids.image_pad);
  get("<|video_pad|>", ids.video_pad);
  VLPAR_CHECK(missing.empty(), "ChatTokenIds: the tokenizer lacks the chat-template token(s) {} (a Qwen2/3-VL "
              "tokenizer.json has them as added tokens)", missing);
  return ids;
}

MropeDesc ChatTokenIds::mrope_desc(int64_t spatial_merge_size) const {
  MropeDesc d;
  d.image_token_id = image_pad;
  d.video_token_id = video_pad;
  d.vision_start_token_id = vision_start;
  d.spatial_merge_size = spatial_merge_size;
  return d;
}

int64_t TokenizedSample::image_patches() const { return sum_patches(image_grids); }
int64_t TokenizedSample::video_patches() const { return sum_patches(video_grids); }
int64_t TokenizedSample::num_label_tokens() const {
  return std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreLabel; });
}

Status ConversationOptions::validate() const {
  VLPAR_RETURN_IF_ERROR(image.validate());
  VLPAR_RETURN_IF_ERROR(video.validate());
  VLPAR_CHECK(image.patch_size == video.spatial.patch_size && image.merge_size == video.spatial.merge_size &&
                  image.temporal_patch_size == video.spatial.temporal_patch_size,
              "ConversationOptions: images (patch {}, temporal {}, merge {}) and videos (patch {}, temporal {}, merge "
              "{}) must share patch, temporal patch and merge sizes (one vision encoder reads both)",
              image.patch_size, image.temporal_patch_size, image.merge_size, video.spatial.patch_size,
              video.spatial.temporal_patch_size, video.spatial.merge_size);
  VLPAR_CHECK(!record_field.empty(), "ConversationOptions: record_field is empty");
  return Status::Ok();
}

Result<ConversationBuilder> ConversationBuilder::create(std::shared_ptr<const Tokenizer> tokenizer,
                                                        ConversationOptions options) {
  VLPAR_CHECK(tokenizer != nullptr, "ConversationBuilder: no tokenizer");
  VLPAR_RETURN_IF_ERROR(options.validate());
  VLPAR_ASSIGN_OR_RETURN(ChatTokenIds ids, ChatTokenIds::from_tokenizer(*tokenizer));
  return ConversationBuilder(std::move(tokenizer), std::move(options), ids);
}

namespace {

// Concatenates the pixel rows of several processed images (or videos); a single one is moved, not copied.
template <class Processed>
PixelValues gather_pixels(std::span<Processed> items) {
  if (items.size() == 1) return std::move(items[0].pixel_values);
  size_t n = 0;
  for (const Processed& it : items) n += it.pixel_values.size();
  PixelValues out;
  out.reserve(n);
  for (const Processed& it : items) out.insert(out.end(), it.pixel_values.begin(), it.pixel_values.end());
  return out;
}

template <class Processed>
PixelValues copy_pixels(std::span<const Processed> items) {
  size_t n = 0;
  for (const Processed& it : items) n += it.pixel_values.size();
  PixelValues out;
  out.reserve(n);
  for (const Processed& it : items) out.insert(out.end(), it.pixel_values.begin(), it.pixel_values.end());
  return out;
}

}  // namespace

Result<TokenizedSample> ConversationBuilder::tokenize(const Conversation& c, std::span<const ProcessedImage> images,
                                                      std::span<const ProcessedVideo> videos,
                                                      std::string_view key) const {
  VLPAR_ASSIGN_OR_RETURN(TokenizedSample out, tokenize_text(c, images, videos, key));
  out.pixel_values = copy_pixels(images);
  out.pixel_values_videos = copy_pixels(videos);
  return out;
}

Result<TokenizedSample> ConversationBuilder::tokenize_text(const Conversation& c,
                                                           std::span<const ProcessedImage> images,
                                                           std::span<const ProcessedVideo> videos,
                                                           std::string_view key) const {
  VLPAR_CHECK(!c.turns.empty(), "sample '{}': the conversation has no turns", key);
  VLPAR_ASSIGN_OR_RETURN(const Placement place, check_placeholders(c, static_cast<int64_t>(images.size()),
                                                                  static_cast<int64_t>(videos.size()), key));
  const bool all_text = options_.label_mode == LabelMode::kAllText;
  if (!all_text && options_.require_supervised) {
    const bool has_reply = std::any_of(c.turns.begin(), c.turns.end(),
                                       [](const ChatTurn& t) { return t.role == ChatRole::kAssistant; });
    VLPAR_CHECK(has_reply, "sample '{}': no assistant turn, so nothing to supervise (LabelMode::kAssistant)", key);
  }

  TokenizedSample out;
  out.key = std::string(key);
  int64_t patch_dim = 0;
  for (const ProcessedImage& im : images) {
    VLPAR_CHECK(patch_dim == 0 || im.patch_dim == patch_dim, "sample '{}': images differ in patch_dim ({} vs {})", key,
                im.patch_dim, patch_dim);
    patch_dim = im.patch_dim;
    out.image_grids.push_back(im.grid);
  }
  for (const ProcessedVideo& v : videos) {
    VLPAR_CHECK(patch_dim == 0 || v.patch_dim == patch_dim, "sample '{}': videos differ in patch_dim ({} vs {})", key,
                v.patch_dim, patch_dim);
    VLPAR_CHECK(static_cast<int64_t>(v.timestamp_texts.size()) == v.grid.t,
                "sample '{}': video has {} timestamps for {} temporal patches", key, v.timestamp_texts.size(),
                v.grid.t);
    patch_dim = v.patch_dim;
    out.video_grids.push_back(v.grid);
  }
  out.patch_dim = patch_dim;

  const ChatTokenIds& ids = ids_;
  StreamBuilder sb(*tokenizer_, key, out);
  size_t next_image = 0, next_video = 0;
  const auto emit_image = [&]() -> Status {
    const ProcessedImage& im = images[next_image++];
    VLPAR_RETURN_IF_ERROR(sb.token(ids.vision_start, false));
    VLPAR_RETURN_IF_ERROR(sb.token(ids.image_pad, false, im.num_tokens));
    return sb.token(ids.vision_end, false);
  };
  const auto emit_video = [&]() -> Status {
    const ProcessedVideo& v = videos[next_video++];
    for (int64_t t = 0; t < v.grid.t; ++t) {
      sb.text(v.timestamp_texts[static_cast<size_t>(t)], false);
      VLPAR_RETURN_IF_ERROR(sb.token(ids.vision_start, false));
      VLPAR_RETURN_IF_ERROR(sb.token(ids.video_pad, false, v.tokens_per_temporal_patch));
      VLPAR_RETURN_IF_ERROR(sb.token(ids.vision_end, false));
    }
    return Status::Ok();
  };

  bool prepended = false;
  for (const ChatTurn& turn : c.turns) {
    const bool reply = all_text || turn.role == ChatRole::kAssistant;
    VLPAR_RETURN_IF_ERROR(sb.token(ids.im_start, all_text));
    sb.text(chat_role_name(turn.role), all_text);
    sb.text("\n", all_text);
    if (!prepended && turn.role == ChatRole::kUser) {
      prepended = true;
      if (place.prepend_images)
        while (next_image < images.size()) VLPAR_RETURN_IF_ERROR(emit_image());
      if (place.prepend_videos)
        while (next_video < videos.size()) VLPAR_RETURN_IF_ERROR(emit_video());
    }
    std::string_view rest = turn.content;
    while (!rest.empty()) {
      const size_t pi = rest.find(kImagePlaceholder), pv = rest.find(kVideoPlaceholder);
      const size_t p = std::min(pi, pv);
      sb.text(rest.substr(0, p), reply);
      if (p == std::string_view::npos) break;
      if (p == pi) {
        VLPAR_RETURN_IF_ERROR(emit_image());
        rest.remove_prefix(p + kImagePlaceholder.size());
      } else {
        VLPAR_RETURN_IF_ERROR(emit_video());
        rest.remove_prefix(p + kVideoPlaceholder.size());
      }
    }
    VLPAR_RETURN_IF_ERROR(sb.token(ids.im_end, reply));
    sb.text("\n", all_text);
  }
  VLPAR_RETURN_IF_ERROR(sb.flush());
  VLPAR_CHECK_CODE(next_image == images.size() && next_video == videos.size(), StatusCode::kInternal,
                   "sample '{}': {} of {} images and {} of {} videos placed", key, next_image, images.size(),
                   next_video, videos.size());
  if (!all_text && options_.require_supervised)
    VLPAR_CHECK(out.num_label_tokens() > 0, "sample '{}': no supervised token", key);
  return out;
}

Result<TokenizedSample> ConversationBuilder::build(const Sample& sample) const {
  const SampleField* rec = sample.field(options_.record_field);
  VLPAR_CHECK(rec != nullptr, "sample '{}': no '{}' field (the conversation record)", sample.key,
              options_.record_field);
  const std::string_view text(reinterpret_cast<const char*>(rec->data.data()), rec->data.size());
  VLPAR_ASSIGN_OR_RETURN(const Conversation conv, parse_conversation(text, sample.key));
  VLPAR_ASSIGN_OR_RETURN(const std::vector<const SampleField*> image_fields, resolve_images(sample, conv));
  // Counts first: a bad record fails before any pixel is decoded.
  VLPAR_ASSIGN_OR_RETURN(const Placement place, check_placeholders(conv, static_cast<int64_t>(image_fields.size()),
                                                                  static_cast<int64_t>(conv.videos.size()),
                                                                  sample.key));
  (void)place;

  std::vector<ProcessedImage> images;
  images.reserve(image_fields.size());
  for (size_t i = 0; i < image_fields.size(); ++i) {
    const SampleField* f = image_fields[i];
    Result<Image> im = decode_image(f->data, sample.key, options_.decode);
    if (!im.ok())
      return VLPAR_STATUS(im.status().code(), "sample '{}': image {} (field '{}'): {}", sample.key, i, f->ext,
                          im.status().message());
    Result<ProcessedImage> p = process_image(im.value(), options_.image);
    if (!p.ok())
      return VLPAR_STATUS(p.status().code(), "sample '{}': image {} (field '{}'): {}", sample.key, i, f->ext,
                          p.status().message());
    images.push_back(std::move(p).value());
  }
  std::vector<ProcessedVideo> videos;
  for (size_t v = 0; v < conv.videos.size(); ++v) {
    const VideoRef& ref = conv.videos[v];
    std::vector<Image> frames;
    frames.reserve(ref.frames.size());
    for (size_t k = 0; k < ref.frames.size(); ++k) {
      VLPAR_ASSIGN_OR_RETURN(const SampleField* f, resolve_frame(sample, ref.frames[k], v, k));
      Result<Image> im = decode_image(f->data, sample.key, options_.decode);
      if (!im.ok())
        return VLPAR_STATUS(im.status().code(), "sample '{}': video {} frame {} (field '{}'): {}", sample.key, v, k,
                            f->ext, im.status().message());
      frames.push_back(std::move(im).value());
    }
    const double fps = ref.fps > 0 ? ref.fps : (conv.record_fps > 0 ? conv.record_fps : options_.video.sampling.fps);
    Result<ProcessedVideo> p = process_video(frames, fps, options_.video);
    if (!p.ok())
      return VLPAR_STATUS(p.status().code(), "sample '{}': video {}: {}", sample.key, v, p.status().message());
    videos.push_back(std::move(p).value());
  }
  VLPAR_ASSIGN_OR_RETURN(TokenizedSample out, tokenize_text(conv, images, videos, sample.key));
  out.pixel_values = gather_pixels(std::span<ProcessedImage>(images));
  out.pixel_values_videos = gather_pixels(std::span<ProcessedVideo>(videos));
  return out;
}

}  // namespace vlpar::data
