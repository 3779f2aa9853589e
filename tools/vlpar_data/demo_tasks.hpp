#pragma once
// The demo dataset's questions and how their answers are computed from pixels (`vlpar-data make-demo`, issue 5
// item 9). Every answer is a coarse statistic of the image the model sees, so a model can only answer by looking,
// and a tiny one can learn it:
//
//   type          question (after "<image>\n")                                         answers            chance
//   brighter_lr   Which half of the picture is brighter, left or right?                left, right         1/2
//   brighter_tb   Which half of the picture is brighter, top or bottom?                top, bottom         1/2
//   orientation   Is the picture wider or taller?                                      wider, taller       1/2
//   colour        Which colour dominates the <top-left|top-right|bottom-left|          red, green, blue    1/3
//                 bottom-right> quarter of the picture: red, green or blue?
//
// Definitions (W×H image, integer halves; the middle column/row of an odd size belongs to neither half):
//   luma        Y = 0.299 R + 0.587 G + 0.114 B (BT.601, as PIL's convert("L"))
//   brighter_lr left = columns [0, ⌊W/2⌋), right = [⌈W/2⌉, W); answer = the half with the larger mean Y;
//               margin = |mean_left − mean_right| / 255
//   brighter_tb the same over rows
//   orientation the size the Qwen processor feeds the model: (h̄, w̄) = smart_resize(H, W, factor, min, max);
//               answer = wider when w̄ > h̄, taller when h̄ > w̄; margin = max(h̄, w̄) / min(h̄, w̄) − 1
//   colour      quarter q = [0, ⌊W/2⌋) or [⌈W/2⌉, W) × [0, ⌊H/2⌋) or [⌈H/2⌉, H); answer = the channel with the
//               largest mean; margin = (largest − second largest) / 255
// A sample is kept only when its margin reaches the type's threshold (DemoThresholds), computed on the decoded
// JPEG that goes into the shard.
// Test: tools/vlpar_data/test_demo_tasks.cpp.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/data/image.hpp"

namespace vlpar::tools {

enum class QuestionType : int { kBrighterLR = 0, kBrighterTB = 1, kOrientation = 2, kColour = 3 };
inline constexpr int kNumQuestionTypes = 4;

enum class Quadrant : int { kTopLeft = 0, kTopRight = 1, kBottomLeft = 2, kBottomRight = 3 };

/// One question type: its name in the record ("question_type"), the answers, chance = 1 / answers.
struct QuestionSpec {
  QuestionType type;
  std::string name;                  // "brighter_lr", ...
  std::vector<std::string> answers;  // the answer set, in a fixed order
  double chance() const { return 1.0 / static_cast<double>(answers.size()); }
};

/// The four types, indexed by int(QuestionType).
const std::vector<QuestionSpec>& question_specs();

/// @brief The question text that follows "<image>\n" (the quadrant only matters for kColour).
std::string question_text(QuestionType type, Quadrant quadrant = Quadrant::kTopLeft);

/// "top-left", "top-right", "bottom-left", "bottom-right".
const char* quadrant_name(Quadrant q);

/// An answer and how clear it is (see the file comment for each type's margin).
struct Answer {
  int index = -1;       // into question_specs()[type].answers
  double margin = 0.0;
};

/// Axis-aligned rectangle in pixels: columns [x, x + w), rows [y, y + h).
struct Rect {
  int64_t x = 0, y = 0, w = 0, h = 0;
};

/// Mean R, G, B and luma over a rectangle.
struct RegionMeans {
  double r = 0, g = 0, b = 0;
  double luma() const { return 0.299 * r + 0.587 * g + 0.114 * b; }
};

/// @brief Means over `rect` by direct summation (the definition; rect must lie inside the image and be non-empty).
RegionMeans region_means(const data::Image& image, Rect rect);

/// Summed-area tables of R, G and B: O(1) region means of any rectangle of one image. Used to screen candidate
/// crops of a large photo before paying for their resize and encode; the kept sample is re-checked on its pixels.
class IntegralImage {
 public:
  explicit IntegralImage(const data::Image& image);
  int64_t width() const { return width_; }
  int64_t height() const { return height_; }
  RegionMeans means(Rect rect) const;

 private:
  int64_t width_ = 0, height_ = 0;
  std::vector<uint64_t> sums_;  // [(H+1), (W+1), 3] inclusive prefix sums with a zero first row and column
};

/// The halves and quarters of a W×H region (file comment), as rectangles relative to `outer`.
Rect left_half(Rect outer);
Rect right_half(Rect outer);
Rect top_half(Rect outer);
Rect bottom_half(Rect outer);
Rect quarter(Rect outer, Quadrant q);

/// @brief brighter_lr / brighter_tb from the means of the two halves.
Answer brighter_answer(const RegionMeans& first, const RegionMeans& second);
/// @brief colour from the means of the quarter.
Answer colour_answer(const RegionMeans& quarter_means);

/// Processor settings for the orientation answer: the grid the model sees.
struct OrientationConfig {
  int64_t factor = 32;        // patch_size · merge_size
  int64_t min_pixels = 4096;  // 64²
  int64_t max_pixels = 25600; // 160²
};

/// @brief The answer of `type` for a whole image (the definition, on its pixels). For kOrientation the margin is
/// computed from smart_resize(H, W, config); errors from smart_resize are returned.
Result<Answer> answer_for(const data::Image& image, QuestionType type, Quadrant quadrant,
                          const OrientationConfig& orientation = {});

}  // namespace vlpar::tools
