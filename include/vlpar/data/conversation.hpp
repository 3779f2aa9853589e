#pragma once
// Conversation records → the Qwen chat-template token stream with vision expansion and SFT labels (issue 5,
// item 5; spec qwen3vl.md §2.1–2.2, formats-and-conventions.md §2).
//
// Record (one JSON object, UTF-8), either spelling:
//   ShareGPT/LLaVA  {"conversations": [{"from": "system"|"human"|"gpt", "value": "..."}, ...], ...}
//   OpenAI-ish      {"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...], ...}
//                   where content is a string or a list of items {"type": "text", "text": "..."} /
//                   {"type": "image"...} / {"type": "video"...} (an image/video item stands for one placeholder)
//   ("human"/"user" → user, "gpt"/"assistant" → assistant; any other role is an error.)
// `<image>` and `<video>` in a turn's text are placeholders, taking the images/videos in reading order. A record
// with images (videos) but no `<image>` (`<video>`) placeholder gets them all at the start of its first user turn,
// images first (LLaVA's rule; no separator, as Qwen's template puts media items before the text). Any other count
// mismatch is an error. A system turn may not hold media (Qwen's template rule).
//
// Media of a sample (webdataset.hpp Sample; the layout written by webdataset_writer.hpp):
//   images  the record's "image"/"images" (a name or a list of names) resolve, in order, to the field whose
//           extension equals the name or the name's basename; without such a field, to the numbered fields
//           "0.jpg", "1.png", ... (the writer's multi-image layout) or, for one image, the single "jpg" / "jpeg" /
//           "png" field. A record without image names takes the numbered fields (ordered by number, which must
//           run 0..n−1) or else the single image field. Image fields: extensions jpg, jpeg, png.
//   videos  "video": one video or a list of them; "videos": a list. A video is a list of frame names or
//           {"frames": [...], "fps": f}; frames resolve to fields like images. fps: the video's own, else the
//           record's "fps", else FrameSamplingConfig::fps (then every frame is kept). A video given as one file
//           name (an mp4, ...) is not supported: an error.
//
// Token stream (Qwen2/3-VL chat template, no default system prompt, no generation prompt):
//   per turn          <|im_start|>{system|user|assistant}\n{content}<|im_end|>\n
//   each image        <|vision_start|> + N × <|image_pad|> + <|vision_end|>,  N = t·h·w / merge²
//   each video        per temporal patch i: "<{ts_i:.1f} seconds>" + <|vision_start|> + (h·w / merge²) ×
//                     <|video_pad|> + <|vision_end|>   (the text joins the surrounding text, as HF's processor
//                     does its string replacement)
// Text between special tokens is encoded as ONE run (exactly what HF's tokenizer sees for the expanded prompt),
// so ids equal HF's processor on the same template text (tools/golden/make_chat_fixture.py).
//
// Labels (unshifted, HF convention; −100 = ignored):
//   LabelMode::kAssistant (SFT)  the assistant replies' content tokens and their <|im_end|>; −100 elsewhere (the
//                                "<|im_start|>assistant\n" header, the "\n" after <|im_end|>, other turns). A token
//                                that straddles the header/content boundary (e.g. "\n\n" when the reply starts
//                                with "\n") carries content and is supervised.
//   LabelMode::kAllText          every text token (template tokens included) except vision markup.
//   In both modes vision markup is −100: <|vision_start|>, pads, <|vision_end|> and the video timestamp text.
//
// Errors name the sample key ("sample '<key>': ..."): malformed JSON, no conversations/messages, an unknown role,
// a turn without text, more placeholders than media (or media left unused), a system turn with media, a missing
// or undecodable image, no supervised token in kAssistant mode, a special token missing from the tokenizer.
// The loader (loader.hpp) counts such samples and skips them.
// Test: tests/unit/test_conversation.cpp (golden ids and labels from HF's Qwen3VLProcessor over the committed tiny
// tokenizer: tests/fixtures/chat/, made by tools/golden/make_chat_fixture.py).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/data/image_decode.hpp"
#include "vlpar/data/image_processor.hpp"
#include "vlpar/data/mrope_positions.hpp"
#include "vlpar/data/tokenizer.hpp"
#include "vlpar/data/webdataset.hpp"

namespace vlpar::data {

inline constexpr int32_t kIgnoreLabel = -100;

enum class ChatRole { kSystem, kUser, kAssistant };
/// "system", "user", "assistant" (the template's spelling).
const char* chat_role_name(ChatRole role);

struct ChatTurn {
  ChatRole role = ChatRole::kUser;
  std::string content;  // UTF-8; may hold <image> / <video> placeholders
};

/// One video of a record: frame names in time order and the native frame rate (0 = not given).
struct VideoRef {
  std::vector<std::string> frames;
  double fps = 0.0;
};

/// A parsed record.
struct Conversation {
  std::vector<ChatTurn> turns;
  std::vector<std::string> images;  // image names ("image"/"images"); empty when the record names none
  std::vector<VideoRef> videos;
  double record_fps = 0.0;          // the record's "fps" / "video_fps" (0 = not given)
};

/// @brief Parses a record (see the file comment). Errors name `key`.
Result<Conversation> parse_conversation(std::string_view json, std::string_view key);

/// The chat template's special tokens, looked up in the tokenizer by their spelling.
struct ChatTokenIds {
  int32_t im_start = -1;      // <|im_start|>
  int32_t im_end = -1;        // <|im_end|>
  int32_t vision_start = -1;  // <|vision_start|>
  int32_t vision_end = -1;    // <|vision_end|>
  int32_t image_pad = -1;     // <|image_pad|>
  int32_t video_pad = -1;     // <|video_pad|>
  /// @brief The ids from tokenizer.token_to_id; an error names every missing token.
  static Result<ChatTokenIds> from_tokenizer(const Tokenizer& tokenizer);
  /// The ids compute_mrope_positions reads (merge size from the processor).
  MropeDesc mrope_desc(int64_t spatial_merge_size) const;
};

enum class LabelMode {
  kAssistant,  // SFT: supervise the assistant replies (+ their <|im_end|>)
  kAllText,    // caption / pre-training: supervise every text token
};

/// One tokenized sample: the unit the packer (packing.hpp) works on.
struct TokenizedSample {
  std::string key;
  std::vector<int32_t> input_ids;            // [S]
  std::vector<int32_t> labels;               // [S], kIgnoreLabel where not supervised
  PixelValues pixel_values;                  // [Σ_images t·h·w, patch_dim] in image order
  std::vector<VisionGrid> image_grids;       // one (t, h, w) per image, patch units
  PixelValues pixel_values_videos;           // [Σ_videos t·h·w, patch_dim]
  std::vector<VisionGrid> video_grids;       // one per video
  int64_t patch_dim = 0;                     // C·Tp·P·P (0 for a text-only sample)

  int64_t num_tokens() const { return static_cast<int64_t>(input_ids.size()); }
  int64_t num_images() const { return static_cast<int64_t>(image_grids.size()); }
  int64_t num_videos() const { return static_cast<int64_t>(video_grids.size()); }
  int64_t image_patches() const;
  int64_t video_patches() const;
  /// Σ t·h·w over images and videos: the vision encoder's sequence length for this sample.
  int64_t vision_patches() const { return image_patches() + video_patches(); }
  /// Labels that are not kIgnoreLabel.
  int64_t num_label_tokens() const;
};

struct ConversationOptions {
  LabelMode label_mode = LabelMode::kAssistant;
  std::string record_field = "json";     // the sample field holding the record
  ImageProcessorConfig image;            // Qwen3-VL hub preprocessor_config.json by default
  VideoProcessorConfig video;            // Qwen3-VL hub video_preprocessor_config.json by default
  DecodeOptions decode;
  bool require_supervised = true;        // kAssistant: a sample without an assistant reply is an error
  /// @brief Checks the processor configs and that images and videos share patch and merge sizes.
  Status validate() const;
};

/// Turns records (and their media) into TokenizedSamples. Immutable after creation; a const builder may be used
/// by any number of threads at once (the tokenizer is thread-safe).
class ConversationBuilder {
 public:
  /// @brief Looks up the special tokens and checks the options.
  static Result<ConversationBuilder> create(std::shared_ptr<const Tokenizer> tokenizer, ConversationOptions options);

  /// @brief A whole sample: parse the record field, resolve and decode the media, process them, tokenize.
  Result<TokenizedSample> build(const Sample& sample) const;

  /// @brief The token stream and labels of an already parsed conversation with processed media (images and
  /// videos in the record's order). Pixel values are copied into the result.
  Result<TokenizedSample> tokenize(const Conversation& conversation, std::span<const ProcessedImage> images,
                                   std::span<const ProcessedVideo> videos, std::string_view key) const;

  const ChatTokenIds& token_ids() const { return ids_; }
  const ConversationOptions& options() const { return options_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  /// The MropeDesc of this builder's tokens and merge size.
  MropeDesc mrope_desc() const { return ids_.mrope_desc(options_.image.merge_size); }

 private:
  ConversationBuilder(std::shared_ptr<const Tokenizer> tokenizer, ConversationOptions options, ChatTokenIds ids)
      : tokenizer_(std::move(tokenizer)), options_(std::move(options)), ids_(ids) {}
  // tokenize() without the pixel values (ids, labels, grids, patch_dim): build() moves the pixels in instead.
  Result<TokenizedSample> tokenize_text(const Conversation& conversation, std::span<const ProcessedImage> images,
                                        std::span<const ProcessedVideo> videos, std::string_view key) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  ConversationOptions options_;
  ChatTokenIds ids_;
};

}  // namespace vlpar::data
