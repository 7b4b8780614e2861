#include "train/learning_curve.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "dynemb/core/error.hpp"

namespace dynemb::train {
namespace {

struct Panel {
  double x0, y0, width, height;  // pixels
  double xmax, ymin, ymax;       // data range
  double px(double x) const { return x0 + width * (xmax > 0 ? x / xmax : 0.0); }
  double py(double y) const { return y0 + height * (1.0 - (y - ymin) / (ymax - ymin)); }
};

std::string fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

std::string samples_label(double v) {
  if (v >= 1e6) return fixed(v / 1e6, v >= 1e7 ? 0 : 1) + "M";
  if (v >= 1e3) return fixed(v / 1e3, 0) + "K";
  return fixed(v, 0);
}

void escape_into(std::ostream& out, const std::string& text) {
  for (char c : text) {
    if (c == '<')
      out << "&lt;";
    else if (c == '>')
      out << "&gt;";
    else if (c == '&')
      out << "&amp;";
    else
      out << c;
  }
}

// The frame, ticks and labels of one panel.
void draw_axes(std::ostream& out, const Panel& p, const std::string& ylabel, int ydigits) {
  out << "<rect x='" << p.x0 << "' y='" << p.y0 << "' width='" << p.width << "' height='"
      << p.height << "' fill='none' stroke='#444'/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double y = p.ymin + (p.ymax - p.ymin) * i / 4.0;
    out << "<line x1='" << p.x0 << "' x2='" << p.x0 + p.width << "' y1='" << p.py(y) << "' y2='"
        << p.py(y) << "' stroke='#ddd'/>\n";
    out << "<text x='" << p.x0 - 6 << "' y='" << p.py(y) + 4
        << "' text-anchor='end' font-size='11'>" << fixed(y, ydigits) << "</text>\n";
    const double x = p.xmax * i / 4.0;
    out << "<text x='" << p.px(x) << "' y='" << p.y0 + p.height + 16
        << "' text-anchor='middle' font-size='11'>" << samples_label(x) << "</text>\n";
  }
  out << "<text x='" << p.x0 - 48 << "' y='" << p.y0 + p.height / 2 << "' font-size='12' "
      << "transform='rotate(-90 " << p.x0 - 48 << " " << p.y0 + p.height / 2
      << ")' text-anchor='middle'>" << ylabel << "</text>\n";
}

void draw_series(std::ostream& out, const Panel& p, const std::vector<CurvePoint>& curve,
                 double CurvePoint::*field, const char* color, const char* name, int legend_row) {
  std::ostringstream points;
  bool any = false;
  for (const CurvePoint& c : curve) {
    const double v = c.*field;
    if (!std::isfinite(v)) continue;
    points << p.px(static_cast<double>(c.samples)) << "," << p.py(v) << " ";
    any = true;
  }
  if (!any) return;
  out << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='" << points.str()
      << "'/>\n";
  for (const CurvePoint& c : curve) {
    const double v = c.*field;
    if (!std::isfinite(v)) continue;
    out << "<circle cx='" << p.px(static_cast<double>(c.samples)) << "' cy='" << p.py(v)
        << "' r='2.5' fill='" << color << "'/>\n";
  }
  const double ly = p.y0 + 14 + 16 * legend_row;
  out << "<line x1='" << p.x0 + p.width - 190 << "' x2='" << p.x0 + p.width - 170 << "' y1='"
      << ly - 4 << "' y2='" << ly - 4 << "' stroke='" << color << "' stroke-width='2'/>\n";
  out << "<text x='" << p.x0 + p.width - 164 << "' y='" << ly << "' font-size='11'>" << name
      << "</text>\n";
}

// The [min, max] of the finite values of `fields`, padded.
std::pair<double, double> range_of(const std::vector<CurvePoint>& curve,
                                   std::initializer_list<double CurvePoint::*> fields,
                                   std::optional<double> extra) {
  double lo = INFINITY, hi = -INFINITY;
  for (const CurvePoint& c : curve) {
    for (auto f : fields) {
      if (std::isfinite(c.*f)) {
        lo = std::min(lo, c.*f);
        hi = std::max(hi, c.*f);
      }
    }
  }
  if (extra) {
    lo = std::min(lo, *extra);
    hi = std::max(hi, *extra);
  }
  if (!std::isfinite(lo)) return {0.0, 1.0};
  const double pad = std::max(0.005, (hi - lo) * 0.08);
  return {lo - pad, hi + pad};
}

}  // namespace

void write_learning_curve_svg(const std::string& path, const std::vector<CurvePoint>& curve,
                              std::optional<double> ground_truth_auc, const std::string& title) {
  const double width = 760, height = 560;
  double xmax = 1;
  for (const CurvePoint& c : curve) xmax = std::max(xmax, static_cast<double>(c.samples));
  const auto [auc_lo, auc_hi] =
      range_of(curve, {&CurvePoint::eval_auc, &CurvePoint::train_auc}, ground_truth_auc);
  const auto [loss_lo, loss_hi] =
      range_of(curve, {&CurvePoint::eval_log_loss, &CurvePoint::train_log_loss}, std::nullopt);
  const Panel auc{80, 50, 640, 210, xmax, auc_lo, auc_hi};
  const Panel loss{80, 310, 640, 190, xmax, loss_lo, loss_hi};

  std::ostringstream out;
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  out << "<text x='" << width / 2 << "' y='24' text-anchor='middle' font-size='14'>";
  escape_into(out, title);
  out << "</text>\n";
  draw_axes(out, auc, "AUC", 3);
  if (ground_truth_auc) {
    out << "<line x1='" << auc.x0 << "' x2='" << auc.x0 + auc.width << "' y1='"
        << auc.py(*ground_truth_auc) << "' y2='" << auc.py(*ground_truth_auc)
        << "' stroke='#2a2' stroke-dasharray='6,4' stroke-width='1.5'/>\n";
    const double ly = auc.y0 + 14 + 16 * 2;
    out << "<line x1='" << auc.x0 + auc.width - 190 << "' x2='" << auc.x0 + auc.width - 170
        << "' y1='" << ly - 4 << "' y2='" << ly - 4
        << "' stroke='#2a2' stroke-dasharray='6,4' stroke-width='1.5'/>\n";
    out << "<text x='" << auc.x0 + auc.width - 164 << "' y='" << ly
        << "' font-size='11'>ground truth " << fixed(*ground_truth_auc, 4) << "</text>\n";
  }
  draw_series(out, auc, curve, &CurvePoint::eval_auc, "#1f5fbf", "held-out AUC", 0);
  draw_series(out, auc, curve, &CurvePoint::train_auc, "#e07b00", "running train AUC", 1);
  draw_axes(out, loss, "log loss", 3);
  draw_series(out, loss, curve, &CurvePoint::eval_log_loss, "#1f5fbf", "held-out log loss", 0);
  draw_series(out, loss, curve, &CurvePoint::train_log_loss, "#e07b00", "train log loss", 1);
  out << "<text x='" << loss.x0 + loss.width / 2 << "' y='" << height - 18
      << "' text-anchor='middle' font-size='12'>training samples</text>\n</svg>\n";

  std::ofstream file(path);
  file << out.str();
  if (!file) throw Error("dynemb train: cannot write the plot to '" + path + "'");
}

}  // namespace dynemb::train
